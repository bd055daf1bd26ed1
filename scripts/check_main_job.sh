#!/usr/bin/env bash
# Runs the main job exactly as the README tells a user to (bash scripts/main.sh, default flags)
# and checks what it must print; called by scripts/test.sh, so a broken first command fails CI.
# Checks: exit status 0; each seed example's lines equal tests/seed/expected_seed_example_N.txt
# (and nothing else between the headers); raw_loss_scaler converged and skipped its injected
# overflow; the demo printed its table, its scaled run skipped at least one step (summary.csv) and
# tracked fp32 within 5%, and it wrote a PNG plot.
# Usage: scripts/check_main_job.sh [demo flags]   (build folder: build/, or $MIXPREC_BUILD_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failures=0
fail() {
  echo "check_main_job: FAILED: $*" >&2
  failures=$((failures + 1))
}

# stderr goes to the log too (progress lines), stdout is what is checked.
set +e
bash scripts/main.sh "$@" >"$log" 2>"$log.err"
rc=$?
set -e
cat "$log"
if ((rc != 0)); then
  cat "$log.err" >&2
  rm -f "$log.err"
  echo "check_main_job: FAILED: bash scripts/main.sh exited $rc" >&2
  exit 1
fi
rm -f "$log.err"

# section TITLE_PREFIX: the lines after the header line starting with "== TITLE_PREFIX" up to the
# next "== " header (or a blank line).
section() {
  awk -v p="== $1" 'index($0, p) == 1 {on = 1; next} on && (/^== / || /^$/) {exit} on {print}' "$log"
}
for n in 1 2 3 4; do
  if ! diff <(section "seed example $n:") "tests/seed/expected_seed_example_$n.txt" >/dev/null; then
    fail "seed example $n printed something else than tests/seed/expected_seed_example_$n.txt:"
    diff <(section "seed example $n:") "tests/seed/expected_seed_example_$n.txt" >&2 || true
  fi
done

raw=$(section "raw_loss_scaler")
grep -q "skipped" <<<"$raw" || fail "raw_loss_scaler printed no skipped step"
grep -q ": converged; 1 step skipped (the injected one: skipped, scale halved)" <<<"$raw" ||
  fail "raw_loss_scaler did not report convergence and one handled overflow"

grep -q "^run  *final loss  *vs fp32  *skipped  *final scale" "$log" || fail "no demo table"
for row in "fp32" "fp16 no scaling" "fp16 + GradScaler"; do
  grep -q "^$row  " "$log" || fail "the demo table has no '$row' row"
done
summary=demo_out/summary.csv
if [[ -f $summary ]]; then
  # run,final_loss,skipped_steps,final_scale,...
  awk -F, '$1 == "fp16_scaled" && $3 + 0 > 0 {found = 1} END {exit !found}' "$summary" ||
    fail "the scaled run skipped no step ($summary): the demo shows no backoff"
  awk -F, '$1 == "fp32" {ref = $2} $1 == "fp16_scaled" {s = $2}
           END {r = s / ref; exit !(ref > 0 && r > 0.95 && r < 1.05)}' "$summary" ||
    fail "fp16 + GradScaler does not match fp32 within 5% ($summary)"
else
  fail "no $summary"
fi
if [[ ! -s demo_out/plot.png ]] || [[ $(head -c 8 demo_out/plot.png | od -An -tx1 | tr -d ' \n') != 89504e470d0a1a0a ]]; then
  fail "demo_out/plot.png is missing or not a PNG"
fi
grep -q "^wrote .*demo_out/plot.png" "$log" || fail "the demo did not say it wrote its plot"

if ((failures > 0)); then
  echo "check_main_job: $failures check(s) failed" >&2
  exit 1
fi
echo "check_main_job: the main job ran and printed what the docs say"
