#!/usr/bin/env bash
# pterun on aarch64, emulated: an arm64 Debian root file system (debootstrap + qemu-user-static), the wheel built
# from this checkout installed in it with its dependencies from the package index, then on each emulated CPU the
# demo, every XNNPACK fixture on both engines and a quick test subset.
#
#   sudo tools/aarch64_check.sh                      # the four boards' CPUs, the full run on cortex-a72
#   sudo tools/aarch64_check.sh --cpus cortex-a53    # one CPU, full run
#   sudo tools/aarch64_check.sh --full-cpu all       # the test subset on every CPU too
#   sudo tools/aarch64_check.sh --full-cpu none      # the demo and the fixture check only
#
# The full run: `pterun demo`, every tests/fixtures/xnn_*.pte on --engine numpy and on LiteRT, compared with the
# recorded outputs (tools/aarch64_fixtures.py), and the test subset below. The other CPUs: demo and fixtures.
#
# Needs: root (debootstrap, chroot, mount), a Linux host with binfmt_misc, and Debian's debootstrap,
# qemu-user-static and binfmt-support (installed with apt-get when missing). The root file system is cached in
# $PTERUN_AARCH64_DIR (default /var/tmp/pterun-aarch64): the first run builds it (~8 minutes), later runs reuse it;
# --rebuild starts it over. Exit status: 0 when every check passed, 1 when one failed, 2 for a setup error.
#
# Why each odd step:
# - qemu-user before 8.2 (bookworm has 7.2) shows emulated programs the host's x86 /proc/cpuinfo; LiteRT's CPU
#   detection then finds no CPU and crashes. The script bind-mounts, over /proc/cpuinfo in the chroot, an aarch64
#   one for the emulated CPU (its MIDR, so XNNPACK picks that core's micro-kernels, and the hardware capabilities
#   qemu reports for it). A newer qemu that answers /proc/cpuinfo itself is left alone.
# - Only named board CPUs are emulated: qemu 7.2's "max" CPU has SME, under which LiteRT's int8 results come out
#   wrong (a fault of that emulator; qemu 10 is right).
# - The host's CA bundle and pip index settings are copied into the chroot, so pip reaches the same index.
set -euo pipefail

main() {  # the whole script is one function, so that bash has read all of it before it runs (safe to edit)
CPUS_DEFAULT="cortex-a53 cortex-a72 cortex-a76 neoverse-n1"
CPUS="$CPUS_DEFAULT"
FULL_CPU="cortex-a72"  # the Raspberry Pi 4's core; the other CPUs get the demo and the fixture check
SUITE="${PTERUN_AARCH64_SUITE:-bookworm}"
MIRROR="${PTERUN_AARCH64_MIRROR:-http://deb.debian.org/debian}"
DIR="${PTERUN_AARCH64_DIR:-/var/tmp/pterun-aarch64}"
REBUILD=0
# the quick test subset of the full run, what a CPU can change: the XNNPACK delegate on both engines (LiteRT's
# translation, batching, qd8), the portable kernels on the recorded fixtures and golden values, external data,
# bundled programs, numerics, floating-point state, threads, and the API's contracts (~1400 tests, ~2 minutes
# emulated). Left out: the CLI's, fuzzers', layering, lazy-import and LLM tests (platform-neutral, slow emulated).
TESTS_DEFAULT="tests/test_xnnpack_fixtures.py tests/test_xnnpack.py tests/test_xnnpack_ops.py tests/test_litert.py \
tests/test_litert_nodes.py tests/test_litert_batch.py tests/test_qd8_exact.py tests/test_fixtures.py \
tests/test_golden.py tests/test_external_data.py tests/test_bundled.py tests/test_numerics.py \
tests/test_kernels_misc.py tests/test_fpstate.py tests/test_parallel.py tests/test_runtime_threads.py \
tests/test_const_fold.py tests/test_contract.py tests/test_api.py tests/test_module.py tests/test_inputs.py \
tests/test_errors.py"
TESTS="${PTERUN_AARCH64_TESTS:-$TESTS_DEFAULT}"

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
FULL_GIVEN=0
while [ $# -gt 0 ]; do
    case "$1" in
        --cpus|--full-cpu|--tests|--dir)
            [ $# -ge 2 ] || { echo "aarch64_check: $1 needs a value" >&2; exit 2; } ;;
    esac
    case "$1" in
        --cpus) CPUS="$2"; shift 2 ;;
        --full-cpu) FULL_CPU="$2"; FULL_GIVEN=1; shift 2 ;;
        --tests) TESTS="$2"; shift 2 ;;
        --dir) DIR="$2"; shift 2 ;;
        --rebuild) REBUILD=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "aarch64_check: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
case " $CPUS none all " in
    *" $FULL_CPU "*) ;;
    *) [ "$FULL_GIVEN" = 0 ] || { echo "aarch64_check: --full-cpu $FULL_CPU is not in --cpus '$CPUS'" >&2; exit 2; }
       FULL_CPU="${CPUS%% *}" ;;  # the default CPU is not asked for: the first one gets the full run
esac

REPO="$(cd "$(dirname "$0")/.." && pwd)"
ROOTFS="$DIR/rootfs"
WORK=/opt/pterun-check           # inside the chroot
VENV=/opt/pterun-venv            # inside the chroot
LOGS="$DIR/logs"
T0=$(date +%s)

say() { printf '[aarch64_check %4ds] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { echo "aarch64_check: $*" >&2; exit 2; }

[ "$(id -u)" = 0 ] || die "run as root (debootstrap, chroot and mount need it)"
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock -n 9 || die "another aarch64_check is using $DIR"

# -- host tools ----------------------------------------------------------------------------------------------------
if ! command -v debootstrap >/dev/null || ! command -v qemu-aarch64-static >/dev/null; then
    command -v apt-get >/dev/null || die "install debootstrap and qemu-user-static (Debian/Ubuntu packages)"
    say "installing debootstrap qemu-user-static binfmt-support"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap qemu-user-static binfmt-support >/dev/null \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
             apt-get install -y -q debootstrap qemu-user-static binfmt-support >/dev/null; } \
        || die "apt-get could not install debootstrap qemu-user-static binfmt-support"
fi
QEMU_VERSION="$(qemu-aarch64-static --version | head -n1)"
QEMU_CPUS="$(qemu-aarch64-static -cpu help || true)"  # "-cpu help" exits 1
for cpu in $CPUS; do
    grep -qw -- "$cpu" <<<"$QEMU_CPUS" || die "$QEMU_VERSION does not emulate CPU '$cpu'"
done

# emulated aarch64 programs run through binfmt_misc with the 'F' flag, so they also start inside the chroot
if [ ! -e /proc/sys/fs/binfmt_misc/status ]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null \
        || die "binfmt_misc is not available here (mount -t binfmt_misc failed): aarch64 programs cannot start"
fi
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
    [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || die "qemu-aarch64 is not registered with binfmt_misc"
fi
grep -q '^flags:.*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 \
    || die "qemu-aarch64's binfmt entry lacks the F flag: it would not start inside the chroot"

# -- the chroot's mounts, undone on every exit --------------------------------------------------------------------
MOUNTS=()
cleanup() {
    local i
    for (( i=${#MOUNTS[@]}-1; i>=0; i-- )); do umount -l "${MOUNTS[$i]}" 2>/dev/null || true; done
    MOUNTS=()
}
unmount_leftovers() {  # a run killed outright leaves its mounts: never delete or rebuild through them
    local m
    awk -v r="$ROOTFS/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r \
        | while read -r m; do umount -l "$m"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mount_in() {  # mount_in TARGET MOUNT-ARGS...
    local target="$1"; shift
    mount "$@" "$target"
    MOUNTS+=("$target")
}
enter() {  # enter [ENV=VALUE...] COMMAND...: run in the chroot with the pip settings and a clean environment
    chroot "$ROOTFS" /usr/bin/env -i HOME=/root PATH="$VENV/bin:/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8 \
        PIP_CERT=/etc/pterun-host-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180 \
        "${PIP_PASS[@]}" "$@"
}
PIP_PASS=()
# the host's index settings, where they name a network index (a file:// index on the host is no use inside)
for var in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST; do
    val="${!var:-}"
    case "$val" in http://*|https://*) PIP_PASS+=("$var=$val") ;; esac
done

# -- the root file system (cached) --------------------------------------------------------------------------------
if [ "$REBUILD" = 1 ] || [ ! -e "$ROOTFS/.pterun-ready" ]; then
    say "building an arm64 Debian $SUITE root file system in $ROOTFS (~8 minutes)"
    unmount_leftovers
    rm -rf --one-file-system "$ROOTFS"
    debootstrap --arch=arm64 --variant=minbase --include=python3,python3-venv,ca-certificates \
        "$SUITE" "$ROOTFS" "$MIRROR" >"$DIR/debootstrap.log" 2>&1 \
        || { tail -n 20 "$DIR/debootstrap.log" >&2; die "debootstrap failed (log: $DIR/debootstrap.log)"; }
    chroot "$ROOTFS" /usr/bin/python3 -m venv "$VENV"
    touch "$ROOTFS/.pterun-ready"
    say "root file system ready ($(du -sh "$ROOTFS" | cut -f1))"
else
    say "reusing the root file system in $ROOTFS (--rebuild starts it over)"
fi
mkdir -p "$LOGS"

unmount_leftovers
mount_in "$ROOTFS/proc" -t proc proc
mount_in "$ROOTFS/sys" -t sysfs sysfs  # LiteRT's CPU detection reads /sys/devices/system/cpu
mount_in "$ROOTFS/dev" --rbind /dev    # /dev/shm included: multiprocessing's semaphores
mount --make-rslave "$ROOTFS/dev"      # nothing mounted in the chroot reaches the host's /dev
cp -L /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
cp -L "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$ROOTFS/etc/pterun-host-ca.crt"

# -- pterun: the wheel of this checkout, its dependencies from the index, the tests and fixtures ---------------
# a snapshot of the checkout's files (tracked and new, not ignored): a wheel built in the checkout itself would
# also pack whatever a stale build/ folder there still holds
say "building the wheel from $REPO"
rm -rf "$DIR/src" "$DIR/wheel" && mkdir -p "$DIR/src" "$DIR/wheel"
if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$REPO" && git ls-files -z -co --exclude-standard | tar --null --ignore-failed-read -T - -cf - 2>/dev/null) \
        | tar -xf - -C "$DIR/src"
else
    cp -a "$REPO/." "$DIR/src"
fi
python3 -m pip wheel -q --no-deps -w "$DIR/wheel" "$DIR/src" >"$LOGS/wheel.log" 2>&1 \
    || { tail -n 20 "$LOGS/wheel.log" >&2; die "pip wheel failed (log: $LOGS/wheel.log)"; }
WHEEL="$(basename "$(ls "$DIR"/wheel/pterun-*.whl)")"
rm -rf "$ROOTFS$WORK" && mkdir -p "$ROOTFS$WORK"
cp "$DIR/wheel/$WHEEL" "$ROOTFS$WORK/"
cp -a "$DIR/src/tests" "$ROOTFS$WORK/tests"
cp "$DIR/src/tools/aarch64_fixtures.py" "$ROOTFS$WORK/"
cp "$DIR/src/pyproject.toml" "$ROOTFS$WORK/"  # pytest's settings (the tests import the installed pterun: no src/)
say "installing $WHEEL and its dependencies in the chroot (pip, emulated)"
if ! { enter pip install -q --force-reinstall --no-deps "$WORK/$WHEEL" \
         && enter pip install -q "$WORK/$WHEEL" pytest; } >"$LOGS/pip.log" 2>&1; then
    tail -n 20 "$LOGS/pip.log" >&2; die "pip install in the chroot failed (log: $LOGS/pip.log)"
fi
VERSIONS="$(enter python -c 'import platform, numpy, ml_dtypes, ai_edge_litert, importlib.metadata as m
print(platform.machine(), "Python", platform.python_version(), "numpy", numpy.__version__, "ml_dtypes",
      ml_dtypes.__version__, "ai-edge-litert", m.version("ai-edge-litert"), "pterun", m.version("pterun"))')"
say "in the chroot: $VERSIONS"

# -- /proc/cpuinfo for the emulated CPU ----------------------------------------------------------------------------
# qemu's MIDR for each board CPU (implementer 0x41 = Arm; variant, part, revision)
declare -A MIDR=([cortex-a53]="0x0 0xd03 4" [cortex-a72]="0x0 0xd08 3" [cortex-a76]="0x4 0xd0b 1"
                 [neoverse-n1]="0x4 0xd0c 1" [cortex-a57]="0x1 0xd07 0")
CPUINFO_MOUNTED=""
CPUINFO_HOW=""
cpuinfo_for() {  # cpuinfo_for CPU: make /proc/cpuinfo in the chroot describe CPU, unless qemu answers it itself
    local cpu="$1" n variant part revision features i
    if [ -n "$CPUINFO_MOUNTED" ]; then umount "$CPUINFO_MOUNTED"; CPUINFO_MOUNTED=""; fi
    if enter QEMU_CPU="$cpu" grep -q '^CPU implementer' /proc/cpuinfo; then
        CPUINFO_HOW="emulated by qemu"  # qemu 8.2 and later
        return 0
    fi
    [ -n "${MIDR[$cpu]:-}" ] || die "no MIDR known for $cpu: add it to the MIDR table"
    read -r variant part revision <<<"${MIDR[$cpu]}"
    # the hardware capabilities qemu gives this CPU, named as Linux names them in /proc/cpuinfo
    features="$(enter QEMU_CPU="$cpu" python3 -c '
import ctypes
names = ("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop "
         "sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg").split()
names2 = ("dcpodp sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svef32mm svef64mm svebf16 "
          "i8mm bf16 dgh rng bti mte").split()
getauxval = ctypes.CDLL(None).getauxval
getauxval.restype = ctypes.c_ulong
hw, hw2 = getauxval(16), getauxval(26)
print(" ".join([n for i, n in enumerate(names) if hw >> i & 1] + [n for i, n in enumerate(names2) if hw2 >> i & 1]))
')"
    n="$(nproc)"
    for (( i=0; i<n; i++ )); do
        printf 'processor\t: %d\nBogoMIPS\t: 100.00\nFeatures\t: %s\nCPU implementer\t: 0x41\n' "$i" "$features"
        printf 'CPU architecture: 8\nCPU variant\t: %s\nCPU part\t: %s\nCPU revision\t: %s\n\n' \
            "$variant" "$part" "$revision"
    done >"$DIR/cpuinfo.$cpu"
    mount --bind "$DIR/cpuinfo.$cpu" "$ROOTFS/proc/cpuinfo"
    CPUINFO_MOUNTED="$ROOTFS/proc/cpuinfo"
    MOUNTS+=("$CPUINFO_MOUNTED")
    CPUINFO_HOW="bind-mounted $DIR/cpuinfo.$cpu (part $part, $features)"
}

# -- the checks ---------------------------------------------------------------------------------------------------
declare -A RESULT=() DETAIL=()
CHECKS=(demo fixtures-numpy fixtures-litert tests)
FAILED=0
record() {  # record CPU CHECK STATUS DETAIL
    RESULT["$1/$2"]="$3"; DETAIL["$1/$2"]="$4"
    [ "$3" = pass ] || FAILED=1
    say "$1 $2: $3 $4"
}
check_fixtures() {  # check_fixtures CPU ENGINE
    local cpu="$1" engine="$2" log="$LOGS/$1.fixtures-$2.log" line
    if enter QEMU_CPU="$cpu" python "$WORK/aarch64_fixtures.py" --engine "$engine" "$WORK/tests/fixtures" >"$log" 2>&1
    then line="$(tail -n 1 "$log")"; record "$cpu" "fixtures-$engine" pass "${line#SUMMARY }"
    else line="$(grep '^SUMMARY' "$log" | tail -n 1 || true)"
         record "$cpu" "fixtures-$engine" FAIL "${line:+${line#SUMMARY } }(log: $log)"
    fi
}
for cpu in $CPUS; do
    t_cpu=$(date +%s)
    cpuinfo_for "$cpu"
    say "CPU $cpu (/proc/cpuinfo: $CPUINFO_HOW)"
    log="$LOGS/$cpu.demo.log"
    if enter QEMU_CPU="$cpu" pterun demo >"$log" 2>&1
    then record "$cpu" demo pass "$(grep -m1 'matches' "$log" || true)"
    else record "$cpu" demo FAIL "(log: $log)"; fi
    check_fixtures "$cpu" numpy
    check_fixtures "$cpu" litert
    if [ "$cpu" = "$FULL_CPU" ] || [ "$FULL_CPU" = all ]; then
        log="$LOGS/$cpu.tests.log"
        # shellcheck disable=SC2086 # TESTS is a list of paths
        if enter QEMU_CPU="$cpu" sh -c "cd $WORK && python -m pytest -q -p no:cacheprovider $TESTS" >"$log" 2>&1
        then record "$cpu" tests pass "$(tail -n 1 "$log")"
        else record "$cpu" tests FAIL "$(tail -n 1 "$log") (log: $log)"; fi
    fi
    say "CPU $cpu done in $(( $(date +%s) - t_cpu )) s"
done

# -- summary ------------------------------------------------------------------------------------------------------
echo
echo "pterun $WHEEL on emulated aarch64: $QEMU_VERSION, Debian $SUITE arm64"
echo "$VERSIONS"
echo "tests: $TESTS"
printf '%-12s %-16s %-5s %s\n' CPU check result detail
for cpu in $CPUS; do
    for c in "${CHECKS[@]}"; do
        [ -n "${RESULT[$cpu/$c]:-}" ] || continue
        printf '%-12s %-16s %-5s %s\n' "$cpu" "$c" "${RESULT[$cpu/$c]}" "${DETAIL[$cpu/$c]}"
    done
done
echo "wall time: $(( $(date +%s) - T0 )) s; logs in $LOGS"
return "$FAILED"
}

main "$@"
