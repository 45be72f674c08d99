#!/usr/bin/env bash
# peer_isa.sh: issue 27's side-by-side table in one command: pagoda at every
# ISA level this host has (PAGODA_CPU_ISA=avx2, avxvnni, avx512, amx) beside
# llama.cpp's llama-bench on the same generated files, alternating, plus 16
# sequences vs one on the 110M shape beside llama-batched-bench
# (docs/benchmarks.md, "Issue 27").
#
#   docs/examples/peer_isa.sh [--rounds 2] [--threads 2] [--types "Q8_0 Q4_0 Q4_K_M F16 BF16"]
#       [--levels "avx2 avx512"] [--llama-bin [NAME=]DIR]... [--pagoda PATH] [--out DIR] [--keep]
#       [--shape tinyllama-1.1B]
#
# Defaults: build/core/pagoda, /work/llama.cpp/build/bin, the levels read
# from /proc/cpuinfo. --llama-bin may be given more than once (e.g.
# amx=/work/llama.cpp-build-native/bin avx512=/work/llama.cpp-build-avx512/bin):
# each build gets its own column, run one after the other, and the ratio
# is pagoda's best over the best of them; a build that gives no figure
# (SIGILL) shows "-" and its log says why. Builds nothing. Steps:
#  1. `pagoda gen-model --shape tinyllama-1.1B` in each type into DIR
#     (Q4_K_M: llama-quantize's mix of the F16 file, as llama.cpp makes it;
#     without llama-quantize, gen-model's Q4_K), and the llama-110M Q8_0;
#  2. per round, per model: `pagoda bench --roofline` (512-token prefill,
#     32 decode tokens, --threads T) once per level, then `llama-bench -p
#     512 -n 32 -t T -r 1`; the 1-minute load average logged before each;
#  3. 16 sequences vs one: `pagoda bench --compare batch` (16 x 64 tokens,
#     16-token prompts, decode-phase tok/s) per level, beside
#     `llama-batched-bench -npp 16 -ntg 64 -npl 1,16` (S_TG);
#  4. prints the Markdown tables (best of the rounds; the ratios of the
#     best), writes DIR/raw.tsv and each run's log, and deletes the model
#     files unless --keep.
# Not for: a quiet-machine claim by itself: read the load column.
set -u

rounds=2
threads=2
shape=tinyllama-1.1B
types="Q8_0 Q4_0 Q4_K_M F16 BF16"
levels=""
llama_bins=()
here=$(cd "$(dirname "$0")/../.." && pwd)
pagoda="$here/build/core/pagoda"
out=""
keep=0
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --types) types="$2"; shift 2 ;;
    --levels) levels="$2"; shift 2 ;;
    --llama-bin) llama_bins+=("$2"); shift 2 ;;
    --pagoda) pagoda="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    --shape) shape="$2"; shift 2 ;;
    -h|--help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "peer_isa.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
    esac
done
[ -x "$pagoda" ] || { echo "peer_isa.sh: no pagoda binary at $pagoda (build it, or --pagoda)" >&2; exit 2; }
[ ${#llama_bins[@]} -gt 0 ] || llama_bins=(/work/llama.cpp/build/bin)
# NAME=DIR pairs: the column is "llama.cpp NAME" ("llama.cpp" for one unnamed build)
lnames=(); ldirs=()
for lb in "${llama_bins[@]}"; do
    case "$lb" in
    *=*) lnames+=("llama.cpp ${lb%%=*}"); ldirs+=("${lb#*=}") ;;
    *) lnames+=("llama.cpp${ldirs[0]:+ ${#ldirs[@]}}"); ldirs+=("$lb") ;;
    esac
done
for d in "${ldirs[@]}"; do
    for b in llama-bench llama-batched-bench; do
        [ -x "$d/$b" ] || { echo "peer_isa.sh: no $d/$b (--llama-bin DIR)" >&2; exit 2; }
    done
done
llama_bin=${ldirs[0]}  # llama-quantize's
if [ -z "$levels" ]; then
    flags=$(grep -m1 '^flags' /proc/cpuinfo)
    has() { case " $flags " in *" $1 "*) return 0 ;; esac; return 1; }
    has avx2 && levels="avx2"
    has avx_vnni && levels="$levels avxvnni"
    has avx512f && has avx512_vnni && levels="$levels avx512"
    has amx_int8 && levels="$levels amx"
fi
[ -n "$out" ] || out=$(mktemp -d /tmp/peer-isa.XXXXXX)
mkdir -p "$out" || exit 2
raw="$out/raw.tsv"
: > "$raw"
load1() { cut -d' ' -f1 /proc/loadavg; }
models=()
cleanup() { [ "$keep" = 1 ] || rm -f "$out"/*.gguf; }
trap cleanup EXIT

echo "peer_isa.sh: $(date -u +%FT%TZ) $(nproc) CPUs, levels: $levels; rounds $rounds, $threads threads; in $out" >&2
echo "peer_isa.sh: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2-)" >&2

# 1. the files
gen() { # shape type file
    "$pagoda" gen-model --shape "$1" --type "$2" --out "$3" > "$3.log" 2>&1 ||
        { echo "peer_isa.sh: gen-model $1 $2 failed, see $3.log" >&2; return 1; }
}
for t in $types; do
    f="$out/$shape-$t.gguf"
    if [ "$t" = Q4_K_M ]; then
        if [ -x "$llama_bin/llama-quantize" ]; then
            [ -r "$out/$shape-F16.gguf" ] || gen "$shape" F16 "$out/$shape-F16.gguf" || continue
            "$llama_bin/llama-quantize" "$out/$shape-F16.gguf" "$f" Q4_K_M "$threads" > "$f.log" 2>&1 ||
                { echo "peer_isa.sh: llama-quantize failed, see $f.log" >&2; continue; }
        else
            gen "$shape" Q4_K "$f" || continue
        fi
    else
        [ -r "$f" ] || gen "$shape" "$t" "$f" || continue
    fi
    models+=("$f")
done
# the F16 file made only for Q4_K_M is not benchmarked unless asked for
case " $types " in *" F16 "*) ;; *) rm -f "$out/$shape-F16.gguf" ;; esac
small="$out/llama-110M-Q8_0.gguf"
gen llama-110M Q8_0 "$small" || small=""

# 2. prefill and decode, alternating
run_pagoda() { # model level round
    local m="$1" lv="$2" r="$3" name log ld
    name=$(basename "$m" .gguf)
    log="$out/pagoda-$name-$lv-r$r.log"
    ld=$(load1)
    PAGODA_CPU_ISA="$lv" "$pagoda" bench --model "$m" --roofline --threads "$threads" \
        --set backend.cpu.threads="$threads" --requests 1 --concurrency 1 --prompt-len 16 \
        --output-len 4 --decode-tokens 32 --prefill-tokens 512 > "$log" 2>&1
    # "  run  decode  9.1 tok/s  bound ... ratio 0.91 ..." / "  run  prefill  37.5 tok/s ..."
    # / "  run  prefill  80.1 GFLOP/s  0.42 of the ... peak"
    awk -v n="$name" -v lv="$lv" -v r="$r" -v ld="$ld" '
        $2 == "decode" && $4 == "tok/s" { print "pagoda-" lv "\t" n "\t" r "\tdecode\t" $3 "\t" ld "\t" $14 }
        $2 == "prefill" && $4 == "tok/s" { tps = $3 }
        $2 == "prefill" && $4 == "GFLOP/s" { frac = $5 }
        END { if (tps != "") print "pagoda-" lv "\t" n "\t" r "\tprefill\t" tps "\t" ld "\t" frac }
    ' "$log" >> "$raw"
    grep -q "(512-token prompt)" "$log" || echo "peer_isa.sh: pagoda gave no 512-token prefill, see $log" >&2
}
run_llama() { # model round index
    local m="$1" r="$2" li="$3" name log ld rc
    name=$(basename "$m" .gguf)
    log="$out/llama$li-$name-r$r.log"
    ld=$(load1)
    "${ldirs[$li]}/llama-bench" -m "$m" -p 512 -n 32 -t "$threads" -r 1 -o csv > "$log" 2> "$log.err"
    rc=$?
    [ $rc = 0 ] || echo "peer_isa.sh: ${lnames[$li]} llama-bench exit status $rc on $name, see $log.err" >&2
    awk -F, -v n="$name" -v r="$r" -v ld="$ld" -v tool="${lnames[$li]}" '
        { for (i = 1; i <= NF; i++) gsub(/"/, "", $i) }
        NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        col["avg_ts"] {
            test = $col["n_prompt"] > 0 ? "prefill" : "decode"
            print tool "\t" n "\t" r "\t" test "\t" $col["avg_ts"] "\t" ld "\t-"
        }
    ' "$log" >> "$raw"
    [ -s "$log" ] || echo "peer_isa.sh: llama-bench gave no figures, see $log.err" >&2
}
for r in $(seq 1 "$rounds"); do
    for m in "${models[@]}"; do
        echo "round $r: $(basename "$m") (load $(load1))" >&2
        for lv in $levels; do run_pagoda "$m" "$lv" "$r"; done
        for li in "${!ldirs[@]}"; do run_llama "$m" "$r" "$li"; done
    done
done

# 3. 16 sequences vs one, 110M Q8_0
if [ -n "$small" ]; then
    for r in $(seq 1 "$rounds"); do
        for lv in $levels; do
            log="$out/pagoda-batch-$lv-r$r.log"; ld=$(load1)
            PAGODA_CPU_ISA="$lv" "$pagoda" bench --model "$small" --compare batch --threads "$threads" \
                --set backend.cpu.threads="$threads" > "$log" 2>&1
            # "16 concurrent / single stream: aggregate decode-phase tok/s A vs B = Rx ..."
            awk -v lv="$lv" -v r="$r" -v ld="$ld" '/concurrent \/ single stream/ {
                print "pagoda-" lv "\tbatch-110M\t" r "\tseq16\t" $9 "\t" ld "\t-"
                print "pagoda-" lv "\tbatch-110M\t" r "\tseq1\t" $11 "\t" ld "\t-" }' "$log" >> "$raw"
        done
        for li in "${!ldirs[@]}"; do
            log="$out/llama$li-batch-r$r.log"; ld=$(load1)
            "${ldirs[$li]}/llama-batched-bench" -m "$small" -c 2048 -npp 16 -ntg 64 -npl 1,16 -t "$threads" \
                > "$log" 2>&1
            # the table rows: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | ...
            awk -F'|' -v r="$r" -v ld="$ld" -v tool="${lnames[$li]}" '$2 ~ /^ *16 *$/ && $3 ~ /^ *64 *$/ {
                b = $4 + 0; s = $9 + 0
                print tool "\tbatch-110M\t" r "\t" (b == 16 ? "seq16" : "seq1") "\t" s "\t" ld "\t-" }' "$log" >> "$raw"
        done
    done
fi

# 4. the tables: best of the rounds
echo
echo "$(date -u +%FT%TZ), $threads threads, levels: $levels, rounds $rounds; tok/s, best of the rounds (load before it)"
echo
lnamelist=$(printf '%s|' "${lnames[@]}")
awk -F'\t' -v levels="$levels" -v lnamelist="${lnamelist%|}" '
    BEGIN { nl = split(levels, L, " "); nc = split(lnamelist, C, "|") }
    {
        k = $2 SUBSEP $4; if (!(k in seen)) { seen[k] = 1; order[++nk] = k }
        if (!(($1, k) in best) || $5 + 0 > best[$1, k] + 0) { best[$1, k] = $5; bl[$1, k] = $6; fr[$1, k] = $7 }
        if (!(k in lo) || $6 + 0 < lo[k] + 0) lo[k] = $6
        if (!(k in hi) || $6 + 0 > hi[k] + 0) hi[k] = $6
    }
    END {
        h = "| model | test |"; s = "|---|---|"
        for (i = 1; i <= nl; i++) { h = h " pagoda " L[i] " |"; s = s "---|" }
        for (i = 1; i <= nc; i++) { h = h " " C[i] " |"; s = s "---|" }
        h = h " best pagoda / best llama.cpp |"; s = s "---|"
        if (nl > 1) { h = h " " L[nl] " / " L[1] " |"; s = s "---|" }
        h = h " pagoda vs its bound (" L[nl] ") | load range |"; s = s "---|---|"
        print h; print s
        for (o = 1; o <= nk; o++) {
            k = order[o]; split(k, p, SUBSEP)
            line = "| " p[1] " | " p[2] " |"; bp = 0
            for (i = 1; i <= nl; i++) {
                v = best["pagoda-" L[i], k]
                line = line (v != "" ? sprintf(" %.1f (%s) |", v, bl["pagoda-" L[i], k]) : " - |")
                if (v + 0 > bp) bp = v + 0
            }
            c = 0
            for (i = 1; i <= nc; i++) {
                v = best[C[i], k]
                line = line (v != "" ? sprintf(" %.1f (%s) |", v, bl[C[i], k]) : " - |")
                if (v + 0 > c) c = v + 0
            }
            line = line (c + 0 > 0 && bp > 0 ? sprintf(" %.2fx |", bp / c) : " - |")
            if (nl > 1) {
                a = best["pagoda-" L[1], k]; z = best["pagoda-" L[nl], k]
                line = line (a + 0 > 0 && z + 0 > 0 ? sprintf(" %.2fx |", z / a) : " - |")
            }
            f = fr["pagoda-" L[nl], k]
            what = p[2] == "decode" ? " of read bandwidth |" : p[2] == "prefill" ? " of its peak |" : " |"
            line = line (f != "" && f != "-" ? " " f what : " - |")
            print line " " lo[k] "-" hi[k] " |"
        }
    }
' "$raw" | tee "$out/table.md"
# the 16-vs-1 ratios
awk -F'\t' '$2 == "batch-110M" { if ($5 + 0 > b[$1, $4] + 0) b[$1, $4] = $5; t[$1] = 1 }
    END { for (x in t) if (b[x, "seq1"] > 0)
        printf "16 sequences vs one, 110M Q8_0, %s: %.1f / %.1f = %.2fx\n", x, b[x, "seq16"], b[x, "seq1"], b[x, "seq16"] / b[x, "seq1"] }' \
    "$raw" | sort | tee -a "$out/table.md"
