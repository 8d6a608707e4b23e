# Puts pynnet3's binaries on PATH, like Kaldi's path.sh.  When pynnet3 is
# pip-installed they are already there; from a checkout, bin/ has launchers.
export PYNNET3_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export PATH=$PYNNET3_ROOT/bin:$PATH
export LC_ALL=C
# The recipe runs num_jobs training jobs side by side on the machine's cores;
# one BLAS thread per process avoids OpenBLAS threads spinning against each
# other (Kaldi's queue.pl gives each job --num-threads 1 the same way).
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
