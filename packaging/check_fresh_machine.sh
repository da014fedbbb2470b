#!/usr/bin/env bash
# Prove the README's promise on a clean machine: a minimal Debian 12 (bookworm) made with
# debootstrap, the repository cloned into it, and `bash .ci/run` run inside as root with
# CI=true, exactly as CI does; nothing from this machine leaks in (a fresh environment, an
# empty cache, no pip configuration) but its locally added CA certificates, if any (see
# below). Needs root, apt and the network (Debian mirror, PyPI).
#
#   sudo bash packaging/check_fresh_machine.sh [REPO]   # REPO: a git clone (default: this one)
#
# Environment: GGTUNE_FRESH_DIR (where the chroot goes; default a new folder under
# /var/tmp), GGTUNE_FRESH_KEEP=1 (keep the chroot afterwards), GGTUNE_FRESH_MIRROR (the
# Debian mirror), GGTUNE_FRESH_TIMEOUT (seconds for .ci/run; default 5400, CI's 90 minutes).
# It installs debootstrap with apt-get when missing. The chroot needs about 5 GB.
# Mounts /proc, /sys and /dev (with /dev/pts and /dev/shm) into the chroot and always unmounts them
# and removes the chroot when it ends, also on failure or Ctrl-C. Exit status: .ci/run's.
set -euo pipefail

repo="$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/..}" && git rev-parse --show-toplevel)"
mirror="${GGTUNE_FRESH_MIRROR:-http://deb.debian.org/debian}"
timeout_s="${GGTUNE_FRESH_TIMEOUT:-5400}"

if [[ "$(id -u)" -ne 0 ]]; then
    echo "check_fresh_machine: run as root (debootstrap, chroot and mounts need it)" >&2
    exit 2
fi
if ! command -v debootstrap >/dev/null; then
    echo "==> installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
fi

root="${GGTUNE_FRESH_DIR:-$(mktemp -d /var/tmp/ggtune-fresh-XXXXXX)}"
mkdir -p "$root"
mounted=()
child=""
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    if [[ -n "${child:-}" ]]; then
        kill -TERM "$child" 2>/dev/null || true
        wait "$child" 2>/dev/null || true
    fi
    # processes left inside (a hung test) would keep the mounts busy: end them first
    local pid
    for pid in $(ls /proc | grep -E '^[0-9]+$'); do
        if [[ "$(readlink "/proc/$pid/root" 2>/dev/null)" == "$root" ]]; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || true
    done
    if [[ "${GGTUNE_FRESH_KEEP:-0}" == 1 ]]; then
        echo "==> kept the chroot at $root"
    elif ! grep -q " $root/" /proc/mounts; then
        rm -rf --one-file-system "$root"
    else
        echo "check_fresh_machine: $root still has mounts; not removed" >&2
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

started=$(date +%s)
echo "==> debootstrap bookworm (minbase) into $root"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1 || {
    tail -20 "$root.debootstrap.log" >&2
    echo "check_fresh_machine: debootstrap failed; log: $root.debootstrap.log" >&2
    exit 1
}
rm -f "$root.debootstrap.log"
echo "    $(($(date +%s) - started)) s"

for fs in proc sys dev dev/pts dev/shm; do
    mkdir -p "$root/$fs"
    case "$fs" in
        proc) mount -t proc proc "$root/proc" ;;
        sys) mount -t sysfs sysfs "$root/sys" ;;
        dev) mount --bind /dev "$root/dev" ;;
        dev/pts) mount -t devpts devpts "$root/dev/pts" ;;
        dev/shm) mount -t tmpfs -o mode=1777 shm "$root/dev/shm" ;; # multiprocessing's locks
    esac
    mounted+=("$root/$fs")
done
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
# debootstrap writes no /etc/hosts (the installer, or Docker, does): give it the usual one,
# or `localhost` does not resolve (the tests' fake Hugging Face hub redirects to it)
if [[ ! -e "$root/etc/hosts" ]]; then
    printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
fi
# Behind a TLS-inspecting proxy this machine trusts its own CA certificates
# (/usr/local/share/ca-certificates); the chroot gets them too, for when .ci/run installs
# ca-certificates, and pip is pointed at the system bundle (its own certifi bundle lacks
# them). Nothing else of this machine's configuration goes in.
ca_env=()
shopt -s nullglob
local_cas=(/usr/local/share/ca-certificates/*.crt)
shopt -u nullglob
if ((${#local_cas[@]} > 0)); then
    echo "==> copying this machine's ${#local_cas[@]} local CA certificate(s) into the chroot"
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp "${local_cas[@]}" "$root/usr/local/share/ca-certificates/"
    bundle=/etc/ssl/certs/ca-certificates.crt
    ca_env=(PIP_CERT="$bundle" SSL_CERT_FILE="$bundle" REQUESTS_CA_BUNDLE="$bundle")
fi

echo "==> cloning $repo into the chroot (/root/ggtune, at $(git -C "$repo" rev-parse --short HEAD))"
git clone -q --no-hardlinks "$repo" "$root/root/ggtune"

echo "==> bash .ci/run inside (CI=true, root, no stdin; timeout ${timeout_s} s)"
ci_started=$(date +%s)
# In the background, so that Ctrl-C or a TERM reaches the trap at once (bash runs traps
# only between foreground commands) and cleanup() ends what runs inside.
timeout --kill-after=30 "$timeout_s" chroot "$root" /usr/bin/env -i \
    HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 CI=true TERM=dumb "${ca_env[@]}" \
    bash -c 'cd /root/ggtune && bash .ci/run' </dev/null &
child=$!
status=0
wait "$child" || status=$?
child=""
now=$(date +%s)
minutes() { printf '%d min %02d s' $(($1 / 60)) $(($1 % 60)); }
echo "==> .ci/run exited with $status after $(minutes $((now - ci_started))) (all: $(minutes $((now - started))))"
exit "$status"
