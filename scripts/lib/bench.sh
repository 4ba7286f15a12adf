# Sourced by scripts/bench-*: what the benchmarks share.
#
#   bench_build ARGS...      cargo build ARGS in $profile (PROFILE, default
#                            release; sets $profile, $flag and $target)
#   bench_bank ROOT          in the current folder: key pairs `issuer` and
#                            `bundle`, bundle.json (ROOT/packs/bank, signed),
#                            world.toml (its registries, a frozen clock)
#   bench_token N OUT USER [OWNER]   a mandate for N bank transfers
#   bench_proposals N        N ALLOW bank transfers, one JSON line each
#   bench_allowed FILE...    how many lines are ALLOW (never fails on 0)
# The caller has `set -euo pipefail` and `$ipc` once built.

profile="${PROFILE:-release}"
flag=()
[ "$profile" = release ] && flag=(--release)
target="${CARGO_TARGET_DIR:-$PWD/target}/$profile"

bench_build() {
  cargo build -q "${flag[@]}" "$@"
}

bench_bank() {
  local root="$1"
  "$ipc" keygen -o issuer >/dev/null
  "$ipc" keygen -o bundle >/dev/null
  "$ipc" build -o bundle.json --sign bundle.key "$root/packs/bank" >/dev/null
  cat >world.toml <<TOML
clock = "2026-11-27T18:40:00Z"
mandate_keys = ["issuer.pub"]
bundle_keys = ["bundle.pub"]
[registries]
bank = "$root/packs/bank/registries"
TOML
}

bench_token() {
  local n="$1" out="$2" user="$3" owner=()
  [ -n "${4:-}" ] && owner=(--owner "$4")
  "$ipc" token issue --bundle bundle.json --bundle-key bundle.pub --key issuer.key --pack bank --user "$user" "${owner[@]}" \
    --scope payments.write --claim account=emma-checking --claim currency=EUR \
    --budget 100000000.00 --calls "$n" --now 2026-11-27T18:39:00Z --ttl 3600 -o "$out" >/dev/null
}

bench_proposals() {
  awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++) printf "{\"action\":\"payment.transfer\",\"args\":{\"from_account\":\"emma-checking\",\"payee_iban\":\"DE44500105175407324931\",\"amount\":\"%d.%02d\",\"currency\":\"EUR\"}}\n", 1 + int(i / 100), i % 100 }'
}

bench_allowed() {
  awk '/"decision":"ALLOW"/ { c++ } END { print c + 0 }' "$@"
}
