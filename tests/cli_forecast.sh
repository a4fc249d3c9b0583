#!/usr/bin/env bash
# The forecast trainer end to end on a synthetic series in the CO2 file's form
# (trend + a 12-step season + noise, a few values missing), small settings:
#  - the baselines line, one test row per epoch with an RMSE, the loss falls;
#  - --predictions writes one row per test origin and horizon, with the header
#    tools/plot_forecast reads;
#  - a missing file names scripts/get_data.sh co2; a bad value names its line.
# Usage: cli_forecast.sh FORECAST
set -euo pipefail
forecast=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "cli_forecast: $*" >&2; exit 1; }

awk 'BEGIN { srand(7); print "date,value";
             for (i = 0; i < 400; i++) {
               v = 300 + 0.05 * i + 3 * sin(2 * 3.14159265 * i / 12) + 0.3 * (rand() - 0.5);
               if (i % 97 == 50) print 19000000 + i ","; else printf "%d,%.4f\n", 19000000 + i, v } }' > "$dir/s.csv"

"$forecast" --device cpu --data "$dir/s.csv" --window 24 --horizon 2 --season 12 --levels 3 --nhid 8 --ksize 3 \
  --epochs 3 --log-interval 5 --lr 0.01 --metrics "$dir/m.csv" --predictions "$dir/p.csv" > "$dir/out"
cat "$dir/out"
grep -q "4 missing, filled linearly" "$dir/out" || fail "the missing values were not counted"
grep -q "baselines, test RMSE: persistence [0-9.]*, seasonal persistence (period 12) [0-9.]*, linear AR(24)" "$dir/out" ||
  fail "no baselines line"
grep -q "TCN options other than locuslab's: .*layer_norm" "$dir/out" || fail "the TCN is not the forecaster's configuration"
[ "$(grep -c 'end of epoch .* | RMSE [0-9.]* (persistence' "$dir/out")" -eq 3 ] || fail "expected 3 test lines with an RMSE"
read -r first last < <(awk -F, '$1 == "train" { if (!n++) f = $4; l = $4 } END { print f, l }' "$dir/m.csv")
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f) }' || fail "the training loss did not fall ($first -> $last)"
# 400 values, test = the last 20%: origins 319 .. 397, two horizons each.
[ "$(head -n 1 "$dir/p.csv")" = "label,horizon,actual,tcn,linear,persistence,seasonal" ] || fail "predictions header"
[ "$(($(wc -l < "$dir/p.csv") - 1))" -eq 158 ] || fail "expected 158 prediction rows, got $(($(wc -l < "$dir/p.csv") - 1))"
awk -F, 'NR > 1 && !($4 + 0 == $4 && $4 > 250 && $4 < 350) { bad = 1 } END { exit bad }' "$dir/p.csv" ||
  fail "a TCN forecast is not a number near the series"

err=$("$forecast" --data "$dir/none.csv" 2>&1 >/dev/null) && fail "a missing file was accepted"
echo "$err" | grep -qF "scripts/get_data.sh co2" || fail "missing file: $err"
printf 'date,value\n1,2.0\n2,abc\n' > "$dir/bad.csv"
err=$("$forecast" --data "$dir/bad.csv" 2>&1 >/dev/null) && fail "a bad value was accepted"
echo "$err" | grep -qF "line 3: value 'abc' is not a number" || fail "bad value: $err"
err=$("$forecast" --data "$dir/s.csv" --window 390 2>&1 >/dev/null) && fail "a window longer than the series was accepted"
echo "$err" | grep -qF "are too few for --window 390" || fail "short series: $err"
echo "cli_forecast: ok"
