# Puts pynnet3's binaries on PATH, like Kaldi's path.sh.  When pynnet3 is
# pip-installed they are already there; from a checkout, bin/ has launchers.
export PYNNET3_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export PATH=$PYNNET3_ROOT/bin:$PATH
export LC_ALL=C
