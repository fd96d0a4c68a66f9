#!/usr/bin/env bash
# eraid-sim against the SepBIT authors' simulator: the 56 WA figures docs/benchmarks.md
# records from the reference (its six printed digits), on the same three synthetic traces
# (eraid-tracegen, seeds 1-3), replayed through `--placement all --selection all` — so
# this checks the engine's fidelity and the one-read, many-replays path at once.
# Usage: sim_fidelity.sh BUILD_DIR
set -euo pipefail
BUILD=$1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/eraid-fidelity.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
GEN=$BUILD/tools/eraid-tracegen SIM=$BUILD/tools/eraid-sim
"$GEN" --alpha 1.0 --wss-blocks 32768 --writes 600000 --read-percent 5 --seed 1 > "$WORK/v1.csv"
"$GEN" --alpha 0.6 --wss-blocks 32768 --writes 600000 --read-percent 5 --seed 2 > "$WORK/v2.csv"
"$GEN" --alpha 1.2 --wss-blocks 65536 --writes 600000 --read-percent 5 --seed 3 > "$WORK/v3.csv"
for run in v1:128 v1:512 v2:512 v3:512; do
  t=${run%%:*} size=${run##*:}
  "$SIM" --trace "$WORK/$t.csv" --placement all --selection all --segment-blocks "$size" --csv --quiet |
    tail -n +2 | sed "s/^/$t,/"
done > "$WORK/got.csv"
# volume, placement, selection, segment blocks, the reference's WA
cat > "$WORK/ref.csv" <<'REF'
v1,dac,cost-benefit,128,2.396662
v1,dac,cost-benefit,512,2.404800
v1,dac,greedy,128,2.768128
v1,dac,greedy,512,2.568885
v2,dac,cost-benefit,512,3.226683
v2,dac,greedy,512,3.225127
v3,dac,cost-benefit,512,1.685035
v3,dac,greedy,512,1.921615
v1,fadac,cost-benefit,128,2.342067
v1,fadac,cost-benefit,512,2.354377
v1,fadac,greedy,128,2.731992
v1,fadac,greedy,512,2.592348
v2,fadac,cost-benefit,512,3.216857
v2,fadac,greedy,512,3.267787
v3,fadac,cost-benefit,512,1.677352
v3,fadac,greedy,512,1.919385
v1,fk,cost-benefit,128,2.524185
v1,fk,cost-benefit,512,2.044068
v1,fk,greedy,128,2.611188
v1,fk,greedy,512,2.083590
v2,fk,cost-benefit,512,2.453872
v2,fk,greedy,512,2.441383
v3,fk,cost-benefit,512,1.663185
v3,fk,greedy,512,1.733932
v1,nosep,cost-benefit,128,3.963888
v1,nosep,cost-benefit,512,4.266973
v1,nosep,greedy,128,3.953630
v1,nosep,greedy,512,4.262698
v2,nosep,cost-benefit,512,3.427078
v2,nosep,greedy,512,3.421255
v3,nosep,cost-benefit,512,3.870755
v3,nosep,greedy,512,4.416833
v1,sepbit,cost-benefit,128,2.569008
v1,sepbit,cost-benefit,512,2.578890
v1,sepbit,greedy,128,2.914170
v1,sepbit,greedy,512,2.768263
v2,sepbit,cost-benefit,512,3.338402
v2,sepbit,greedy,512,3.358975
v3,sepbit,cost-benefit,512,1.864445
v3,sepbit,greedy,512,2.143163
v1,sepgc,cost-benefit,128,2.894018
v1,sepgc,cost-benefit,512,3.038045
v1,sepgc,greedy,128,3.366303
v1,sepgc,greedy,512,3.541770
v2,sepgc,cost-benefit,512,3.389542
v2,sepgc,greedy,512,3.394722
v3,sepgc,cost-benefit,512,2.333023
v3,sepgc,greedy,512,3.098842
v1,warcip,cost-benefit,128,2.757178
v1,warcip,cost-benefit,512,2.843810
v1,warcip,greedy,128,3.322123
v1,warcip,greedy,512,3.379772
v2,warcip,cost-benefit,512,3.344287
v2,warcip,greedy,512,3.357278
v3,warcip,cost-benefit,512,2.192803
v3,warcip,greedy,512,2.792998
REF
awk -F, 'NR == FNR { ref[$1 "," $2 "," $3 "," $4] = $5; next }
  { k = $1 "," $2 "," $3 "," $4
    if (!(k in ref)) next
    n++; d = $8 - ref[k]; if (d < 0) d = -d
    if (d > 0.0000051) { bad++; printf "sim_fidelity: %s: eraid-sim %s, reference %s\n", k, $8, ref[k] } }
  END { printf "sim_fidelity: %d of 56 figures compared, %d differ from the reference\n", n, bad
        exit (n != 56 || bad > 0) }' "$WORK/ref.csv" "$WORK/got.csv"
