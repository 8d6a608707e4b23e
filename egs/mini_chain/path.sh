# pynnet3's binaries, like Kaldi's path.sh.  The installed package's are
# used when there are any (pip puts them on PATH), so a recipe tests what was
# installed; only without an install does the checkout's bin/ (launchers
# running ../../src) come first.
export PYNNET3_ROOT=${PYNNET3_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
if ! command -v nnet3-chain-train >/dev/null 2>&1; then
  export PATH=$PYNNET3_ROOT/bin:$PATH
fi
export LC_ALL=C
# The recipe runs num_jobs training jobs side by side on the machine's cores;
# one BLAS thread per process avoids OpenBLAS threads spinning against each
# other (Kaldi's queue.pl gives each job --num-threads 1 the same way).
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
