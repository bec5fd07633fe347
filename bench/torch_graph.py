"""The CUDA-graph capture the PyTorch peers share: warm-up calls on a side
stream (so lazily made state exists), then one call captured into a graph."""
import torch


def capture(fn, warmups=3):
    """(graph, the captured call's result) for fn()."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out
