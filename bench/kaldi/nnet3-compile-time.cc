// bench/kaldi/nnet3-compile-time.cc -- times real Kaldi's compile + optimize
// (CachingOptimizingCompiler, a fresh one per run) for bench/compile.py, which
// compares pynnet3's compiler with it.  Kaldi has no binary that only compiles.
// Written for pynnet3's benchmarks; it uses Kaldi's libraries, not its code.
//
// Build (after Kaldi's src/ is configured and nnet3bin is built; see
// docs/performance.md), from this folder:
//     make KALDI_ROOT=/work/kaldi
// or by hand with one g++ line (the flags of Kaldi's kaldi.mk, K=/work/kaldi/src):
//   g++ -std=c++14 -O1 -DHAVE_OPENBLAS -I$K -I$K/../deps/openblas/include
//       -isystem $K/../deps/openfst/include nnet3-compile-time.cc
//       $K/nnet3/kaldi-nnet3.a $K/chain/kaldi-chain.a $K/cudamatrix/kaldi-cudamatrix.a
//       $K/decoder/kaldi-decoder.a $K/lat/kaldi-lat.a $K/fstext/kaldi-fstext.a
//       $K/hmm/kaldi-hmm.a $K/transform/kaldi-transform.a $K/gmm/kaldi-gmm.a
//       $K/tree/kaldi-tree.a $K/util/kaldi-util.a $K/matrix/kaldi-matrix.a
//       $K/base/kaldi-base.a -L$K/../deps/openfst/lib -lfst
//       -L$K/../deps/openblas/lib -lopenblas -lgfortran -lpthread -ldl -o nnet3-compile-time
//
// Usage: nnet3-compile-time [options] <model-in> <request-in> [<request-in> ...]
//   <model-in>: a raw nnet3 model or an acoustic model (TransitionModel +
//   AmNnetSimple, e.g. final.mdl); <request-in>: a ComputationRequest as
//   ComputationRequest::Write writes it (text or binary), e.g. the
//   request.kaldi-text files of reference/random or those bench/compile.py writes.
// For each request it prints one line on stdout:
//   <request-in> <min-ms> <median-ms> <num-commands> <num-matrices> <min-cpu-ms>
// (wall-clock ms; the last is process CPU time, std::clock, steadier on a busy
// machine; matrices include the empty matrix 0, as Kaldi's stats.txt counts them).
// Options: --runs=N (default 3), --test-mode (batch-norm and dropout test mode
// and CollapseModel, as nnet3-compute does), --use-shortcut and the
// NnetOptimizeOptions flags (--optimize, --consolidate-model-update, ...).

#include <algorithm>
#include <ctime>
#include <vector>

#include "base/kaldi-common.h"
#include "base/timer.h"
#include "hmm/transition-model.h"
#include "nnet3/am-nnet-simple.h"
#include "nnet3/nnet-optimize.h"
#include "nnet3/nnet-utils.h"
#include "util/common-utils.h"

int main(int argc, char *argv[]) {
  using namespace kaldi;
  using namespace kaldi::nnet3;
  try {
    const char *usage =
        "Time CachingOptimizingCompiler::Compile (compile + optimize) of each\n"
        "request, a fresh compiler per run; prints per request:\n"
        "  <request-in> <min-ms> <median-ms> <num-commands> <num-matrices> <min-cpu-ms>\n"
        "Usage: nnet3-compile-time [options] <model-in> <request-in> [<request-in> ...]\n";
    ParseOptions po(usage);
    int32 runs = 3;
    bool test_mode = false;
    NnetOptimizeOptions optimize_opts;
    CachingOptimizingCompilerOptions compiler_opts;
    po.Register("runs", &runs, "Compilations per request (fresh compiler each)");
    po.Register("test-mode", &test_mode, "Set batch-norm/dropout test mode and "
                "collapse the model first, as nnet3-compute does");
    optimize_opts.Register(&po);
    compiler_opts.Register(&po);
    po.Read(argc, argv);
    if (po.NumArgs() < 2) {
      po.PrintUsage();
      return 1;
    }

    Nnet nnet;
    {
      bool binary;
      Input ki(po.GetArg(1), &binary);
      // An acoustic model starts with <TransitionModel>, a raw one with <Nnet3>.
      if (PeekToken(ki.Stream(), binary) == 'T') {
        TransitionModel trans_model;
        AmNnetSimple am_nnet;
        trans_model.Read(ki.Stream(), binary);
        am_nnet.Read(ki.Stream(), binary);
        nnet = am_nnet.GetNnet();
      } else {
        nnet.Read(ki.Stream(), binary);
      }
    }
    if (test_mode) {
      SetBatchnormTestMode(true, &nnet);
      SetDropoutTestMode(true, &nnet);
      CollapseModel(CollapseModelConfig(), &nnet);
    }

    for (int32 i = 2; i <= po.NumArgs(); i++) {
      ComputationRequest request;
      {
        bool binary;
        Input ki(po.GetArg(i), &binary);
        request.Read(ki.Stream(), binary);
      }
      std::vector<double> ms, cpu_ms;
      size_t num_commands = 0, num_matrices = 0;
      for (int32 r = 0; r < runs; r++) {
        CachingOptimizingCompiler compiler(nnet, optimize_opts, compiler_opts);
        std::clock_t cpu_start = std::clock();
        Timer timer;
        std::shared_ptr<const NnetComputation> computation = compiler.Compile(request);
        ms.push_back(1000.0 * timer.Elapsed());
        cpu_ms.push_back(1000.0 * (std::clock() - cpu_start) / CLOCKS_PER_SEC);
        num_commands = computation->commands.size();
        num_matrices = computation->matrices.size();
      }
      std::sort(ms.begin(), ms.end());
      std::sort(cpu_ms.begin(), cpu_ms.end());
      std::cout << po.GetArg(i) << " " << ms.front() << " " << ms[ms.size() / 2]
                << " " << num_commands << " " << num_matrices << " " << cpu_ms.front()
                << std::endl;
    }
    return 0;
  } catch (const std::exception &e) {
    std::cerr << e.what();
    return -1;
  }
}
