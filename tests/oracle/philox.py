"""Philox4x32-10 (Salmon et al., SC'11), vectorised over numpy arrays.

Counters and keys are 32-bit words held in uint64 arrays so that the 32x32-bit
products fit without overflow; every result word is reduced mod 2^32.
"""
import numpy as np

M0 = 0xD2511F53
M1 = 0xCD9E8D57
W0 = 0x9E3779B9
W1 = 0xBB67AE85
MASK = 0xFFFFFFFF

# Known answers (counter, key, output), from the Random123 test vectors.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((MASK, MASK, MASK, MASK), (MASK, MASK), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Four output word arrays for counter words c0..c3 and key words k0, k1
    (scalars or broadcastable arrays of values in [0, 2^32))."""
    u = lambda x: np.asarray(x, dtype=np.uint64) & np.uint64(MASK)
    c0, c1, c2, c3, k0, k1 = map(u, (c0, c1, c2, c3, k0, k1))
    m0, m1, mask = np.uint64(M0), np.uint64(M1), np.uint64(MASK)
    s32 = np.uint64(32)
    for rnd in range(10):
        if rnd:
            k0 = (k0 + np.uint64(W0)) & mask
            k1 = (k1 + np.uint64(W1)) & mask
        p0 = c0 * m0
        p1 = c2 * m1
        hi0, lo0 = p0 >> s32, p0 & mask
        hi1, lo1 = p1 >> s32, p1 & mask
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def check_kat():
    """Raises AssertionError unless the implementation reproduces KAT."""
    for ctr, key, want in KAT:
        got = tuple(int(w) for w in philox4x32_10(*ctr, *key))
        assert got == want, "philox %s %s: got %s want %s" % (
            ctr, key, " ".join("%08x" % w for w in got), " ".join("%08x" % w for w in want))


def word0_for_tokens(seed, pos, ids):
    """Word 0 of Philox for key (seed lo, seed hi) and counter
    (id lo, id hi, pos lo, pos hi), over an array of token ids; seed and pos
    are taken as uint64 two's complement."""
    seed &= (1 << 64) - 1
    pos &= (1 << 64) - 1
    ids = np.asarray(ids, dtype=np.uint64)
    w0, _, _, _ = philox4x32_10(ids & np.uint64(MASK), ids >> np.uint64(32),
                                pos & MASK, pos >> 32, seed & MASK, seed >> 32)
    return w0
