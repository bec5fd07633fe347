#!/usr/bin/env bash
# Greedy acceptance lengths of DSpark drafts for the shipped target, timing-free (the same on every run and
# machine with the same kernels): `make run`'s prompt (heldout.txt line 20) at gamma 3 in blocks of 3, gamma 7,
# and T 0.8 gamma 2; `make run`'s 16 held-out prompts and 55 others (every seventh line past 60 characters not
# among the 16, 96 new tokens) at gamma 3 in blocks of 3 and gamma 7. bench/RESULTS.md's draft tables use it.
#   scripts/draft_acceptance.sh DRAFT_DIR ...      (DSPARK: the binary, default build/dspark; MODELS: the target's
#   directory, default models/)
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/draft_acceptance.sh DRAFT_DIR ..." >&2; exit 2; }
D=${DSPARK:-build/dspark}
M=${MODELS:-models} # the target's directory (MODELS=DIR: DIR/kjv-target)
[ -x "$D" ] || { echo "draft_acceptance: $D is not built (make build, or DSPARK=path)" >&2; exit 2; }
for d in "$@"; do [ -f "$d/config.json" ] || { echo "draft_acceptance: $d/config.json missing" >&2; exit 2; }; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$M/heldout.txt" "$tmp" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1], encoding="utf-8").read().splitlines() if len(l) > 60]
used = set(range(0, 400, 25))
json.dump(lines[0:400:25], open(sys.argv[2] + "/sixteen.json", "w"))
json.dump([l for i, l in enumerate(lines) if i not in used and i % 7 == 3][:64], open(sys.argv[2] + "/others.json", "w"))
PY
P=$(sed -n 20p "$M/heldout.txt")
acc() {
  local out
  out=$("$D" generate --model "$M/kjv-target" --draft "$d" "$@" --seed 1 2>&1 >/dev/null) ||
    { echo "draft_acceptance: dspark generate failed: $out" >&2; touch "$tmp/failed"; return; }
  grep -oE "acceptance length [0-9.]+" <<< "$out" | head -1 | awk '{print $3}'
}
echo "| draft | prompt g3 / g7 / T 0.8 g2 | 16 prompts g3 / g7 | 55 others g3 / g7 |"
echo "|---|---|---|---|"
for d in "$@"; do
  echo "| $d | $(acc --prompt "$P" --max-new 128 --gamma 3 --draft-block gamma) / $(acc --prompt "$P" --max-new 128 --gamma 7) /" \
    "$(acc --prompt "$P" --max-new 128 --gamma 2 --temperature 0.8) | $(acc --prompts "$tmp/sixteen.json" --max-new 128 \
    --gamma 3 --draft-block gamma) / $(acc --prompts "$tmp/sixteen.json" --max-new 128 --gamma 7) |" \
    "$(acc --prompts "$tmp/others.json" --max-new 96 --gamma 3 --draft-block gamma) / $(acc --prompts "$tmp/others.json" \
    --max-new 96 --gamma 7) |"
done
[ ! -f "$tmp/failed" ] || exit 1
