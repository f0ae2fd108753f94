#!/usr/bin/env bash
# Issue 11's router path, measured on the emulated MIPS router (mipsel
# malta 24Kc, 1 CPU, virtio-crypto device): docs/lab/router-anchor.md ("The router path,
# crossing by crossing").
#
#   bash scripts/mips-crossings.sh paths    13 configurations, 4 rotated rounds
#   bash scripts/mips-crossings.sh preempt  GODEBUG=asyncpreemptoff=1 or not, 6 rounds
#   bash scripts/mips-crossings.sh frames   64 KiB against 256 KiB frames on the device
#
# Every run is its own `offload bench` process (both tunnel ends, load and
# sink, 8 MiB, one stream) wrapped in a span, so harness/vm times it by
# qemu's CPU seconds on the host: under TCG on a shared machine the guest's
# clock swings several-fold from run to run, qemu's CPU per byte far less.
# The last table pairs each run with its partner of the same round
# (MB per qemu CPU second, a over b) and gives the median.
set -euo pipefail
cd "$(dirname "$0")/.."

bench='offload bench -streams 1 -bytes 8MiB -repeat 1 -max-frame 64KiB'
apo='GODEBUG=asyncpreemptoff=1'
declare -A cmd=(
	[cbc-sw]="$bench -suite aes-256-cbc-poly1305 -policy software"
	[ctr-sw]="$bench -suite aes-256-ctr-poly1305 -policy software"
	[cbc-dev]="$bench -suite aes-256-cbc-poly1305 -policy afalg:virtio_crypto_aes_cbc"
	[cbc-dev-256k]="$bench -suite aes-256-cbc-poly1305 -policy afalg:virtio_crypto_aes_cbc -max-frame 256KiB"
	[cbc-dev-1m]="$bench -suite aes-256-cbc-poly1305 -policy afalg:virtio_crypto_aes_cbc -max-frame 1MiB"
	[hmac-sw]="$bench -suite aes-256-cbc-hmac-sha256 -policy software"
	[hmac-dev]="$bench -suite aes-256-cbc-hmac-sha256 -policy afalg:virtio_crypto_aes_cbc"
	[hmac-aead]="$bench -suite aes-256-cbc-hmac-sha256 -policy afalg-aead:virtio_crypto"
	[gmac-dev]="$bench -suite aes-256-cbc-gmac -policy afalg:virtio_crypto_aes_cbc"
)
for p in cbc-sw ctr-sw cbc-dev hmac-aead; do
	cmd[$p-apo]="$apo ${cmd[$p]}"
done

args=()
span() { # NAME/rN: one timed run
	args+=(-cmd "echo \"@@offload-vm span-begin name=$1 ref=0 id=\$OFFLOAD_VM_ID\"; ${cmd[${1%/r*}]}; echo \"@@offload-vm span-end name=$1 bytes=8388608 id=\$OFFLOAD_VM_ID\"")
}
pairs=()
case "${1:-}" in
paths)
	order=(cbc-sw cbc-sw-apo ctr-sw ctr-sw-apo cbc-dev cbc-dev-apo cbc-dev-256k cbc-dev-1m hmac-sw hmac-dev hmac-aead hmac-aead-apo gmac-dev)
	for r in 1 2 3 4; do
		for ((k = 0; k < ${#order[@]}; k++)); do
			span "${order[(k + 3 * (r - 1)) % ${#order[@]}]}/r$r"
		done
	done
	pairs=(cbc-sw-apo:cbc-sw ctr-sw-apo:ctr-sw cbc-dev-apo:cbc-dev hmac-aead-apo:hmac-aead cbc-dev-256k:cbc-dev
		cbc-dev-1m:cbc-dev cbc-dev:cbc-sw ctr-sw:cbc-sw hmac-dev:hmac-sw hmac-aead:hmac-dev hmac-aead:cbc-dev gmac-dev:cbc-dev)
	;;
preempt)
	for r in 1 2 3 4 5 6; do
		for p in cbc-dev hmac-aead cbc-sw ctr-sw; do
			if ((r % 2)); then span "$p/r$r" && span "$p-apo/r$r"; else span "$p-apo/r$r" && span "$p/r$r"; fi
			pairs+=("$p-apo:$p")
		done
	done
	;;
frames)
	for r in 1 2 3 4; do
		if ((r % 2)); then span "cbc-dev/r$r" && span "cbc-dev-256k/r$r"; else span "cbc-dev-256k/r$r" && span "cbc-dev/r$r"; fi
	done
	pairs=(cbc-dev-256k:cbc-dev)
	;;
*)
	sed -n '2,14p' "$0" >&2
	exit 2
	;;
esac

log=$(mktemp)
trap 'rm -f "$log"' EXIT
go run ./harness/vm -arch mipsle -smp 1 -virtio-crypto -modules authenc -bin ./cmd/offload -run XXX -timeout 90m \
	"${args[@]}" | tee "$log"
# The span table: NAME/rN runs guest-MB/s host-MB/s qemu-CPU-s MB/qemu-CPU-s ...
awk -v pairs="$(printf '%s\n' "${pairs[@]}" | sort -u | tr '\n' ' ')" '
	$2 == "1" && $1 ~ /\/r[0-9]+$/ { split($1, nr, "/r"); v[nr[1], nr[2]] = $6; rounds[nr[2]] = 1 }
	function median(a, n,   i, j, t) {
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
	}
	END {
		print "\npaired by round, MB per qemu CPU second (a over b):"
		np = split(pairs, ps, " ")
		for (i = 1; i <= np; i++) {
			split(ps[i], ab, ":"); n = 0; line = ""
			for (r in rounds) if ((ab[1], r) in v && (ab[2], r) in v && v[ab[2], r] > 0) {
				x[++n] = v[ab[1], r] / v[ab[2], r]; line = line sprintf(" %.2f", x[n])
			}
			if (n) printf "  %-28s median %.2fx over %d rounds:%s\n", ab[1] " / " ab[2], median(x, n), n, line
		}
	}' "$log"
