"""The UtteranceSplitter and the eg structure hash against Kaldi's own C++.

Kaldi's functions are taken at test time from a Kaldi source tree (KALDI_SRC,
default /tmp/kaldi/src: nnet3/nnet-example-utils.cc, nnet-common.cc,
nnet-example.cc, util/stl-utils.h) and built with small harnesses.  In the
splitter, std::random_device in DistributeRandomlyUniform is swapped for the
same seeded std::mt19937 pynnet3 uses; everything else (RandInt = glibc
rand() with its default seed, the float arithmetic) is Kaldi's.  Skipped when
the Kaldi source or g++ is missing.
"""
from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pynnet3.train.egs_split import ExampleGenerationConfig, UtteranceSplitter

KALDI_SRC = Path(os.environ.get("KALDI_SRC", "/tmp/kaldi/src"))
if not (KALDI_SRC / "nnet3").is_dir() or shutil.which("g++") is None:
    # One skip for the module rather than one per test.
    pytest.skip(f"needs Kaldi's source (KALDI_SRC, {KALDI_SRC}) and g++", allow_module_level=True)

_HARNESS_HEAD = r"""
#include <vector>
#include <string>
#include <unordered_set>
#include <algorithm>
#include <numeric>
#include <random>
#include <limits>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <sstream>
typedef int int32;
#define KALDI_ASSERT(x) assert(x)
struct Sink { template <class T> Sink &operator<<(const T &) { return *this; } };
#define KALDI_ERR (std::abort(), Sink())
#define KALDI_VLOG(v) Sink()
#define KALDI_LOG Sink()
#define KALDI_WARN Sink()
static int GetVerboseLevel() { return 0; }
static int32 RandInt(int32 a, int32 b) { return a == b ? a : a + rand() % (b + 1 - a); }
template <class T> struct VectorHasher {
  size_t operator()(const std::vector<T> &v) const noexcept { size_t h = 0; for (T x : v) h = h * 7853 + x; return h; }
};
using std::unordered_set;
static std::mt19937 *gap_rng;
struct ExampleGenerationConfig {
  int32 left_context = 4, right_context = 3, left_context_initial = -1, right_context_final = -1,
        num_frames_overlap = 0, frame_subsampling_factor = 1;
  std::string num_frames_str; std::vector<int32> num_frames;
};
struct ChunkTimeInfo { int32 first_frame, num_frames, left_context, right_context; std::vector<float> output_weights; };
class UtteranceSplitter {
 public:
  explicit UtteranceSplitter(const ExampleGenerationConfig &c): config_(c) { InitSplitForLength(); }
  void GetChunksForUtterance(int32 utterance_length, std::vector<ChunkTimeInfo> *chunk_info);
  float DefaultDurationOfSplit(const std::vector<int32> &split) const;
  int32 MaxUtteranceLength() const;
  void InitSplits(std::vector<std::vector<int32> > *splits) const;
  void InitSplitForLength();
  void GetChunkSizesForUtterance(int32 utterance_length, std::vector<int32> *chunk_sizes) const;
  void GetGapSizes(int32 utterance_length, bool enforce_subsampling_factor,
                   const std::vector<int32> &chunk_sizes, std::vector<int32> *gap_sizes) const;
  static void DistributeRandomlyUniform(int32 n, std::vector<int32> *vec);
  static void DistributeRandomly(int32 n, const std::vector<int32> &magnitudes, std::vector<int32> *vec);
  void SetOutputWeights(int32 utterance_length, std::vector<ChunkTimeInfo> *chunk_info) const;
  void AccStatsForUtterance(int32, const std::vector<ChunkTimeInfo> &) {}
  const ExampleGenerationConfig &config_;
  std::vector<std::vector<std::vector<int32> > > splits_for_length_;
};
"""

_HARNESS_MAIN = r"""
int main(int argc, char **argv) {
  ExampleGenerationConfig c;
  c.num_frames_str = argv[1]; c.num_frames_overlap = atoi(argv[2]);
  c.frame_subsampling_factor = atoi(argv[3]);
  c.left_context_initial = atoi(argv[4]); c.right_context_final = atoi(argv[5]);
  std::stringstream ss(c.num_frames_str); std::string item;
  while (std::getline(ss, item, ',')) {
    int v = atoi(item.c_str()), m = c.frame_subsampling_factor;
    c.num_frames.push_back(v % m ? m * (v / m + 1) : v);
  }
  std::mt19937 g(atoi(argv[6])); gap_rng = &g;
  UtteranceSplitter s(c);
  for (int len = 1; len <= atoi(argv[7]); len++) {
    std::vector<ChunkTimeInfo> chunks;
    s.GetChunksForUtterance(len, &chunks);
    printf("%d:", len);
    for (auto &ch : chunks) {
      printf(" %d+%d/%d/%d", ch.first_frame, ch.num_frames, ch.left_context, ch.right_context);
      for (float w : ch.output_weights) printf(",%.9g", w);
    }
    printf("\n");
  }
}
"""


def _kaldi_functions(src: str) -> str:
    def between(start: str, end: str) -> str:
        a = src.index(start)
        return src[a:src.index(end, a)]

    body = "\n".join([
        between("float UtteranceSplitter::DefaultDurationOfSplit", "/*"),
        between("void UtteranceSplitter::InitSplitForLength()", "bool UtteranceSplitter::LengthsMatch"),
        between("void UtteranceSplitter::GetChunkSizesForUtterance",
                "void UtteranceSplitter::AccStatsForUtterance"),
        between("void UtteranceSplitter::SetOutputWeights",
                "int32 ExampleMergingConfig::IntSet::LargestValueInRange"),
    ])
    swapped = body.replace("std::random_device rd;\n  std::mt19937 g(rd());\n"
                           "  std::shuffle(vec->begin(), vec->end(), g);",
                           "std::shuffle(vec->begin(), vec->end(), *gap_rng);")
    assert swapped != body, "Kaldi's DistributeRandomlyUniform changed; update the harness"
    return swapped


@pytest.fixture(scope="module")
def kaldi_splitter(tmp_path_factory) -> Path:
    source = KALDI_SRC / "nnet3" / "nnet-example-utils.cc"
    if not source.is_file() or shutil.which("g++") is None:
        pytest.skip("needs Kaldi's source (KALDI_SRC) and g++")
    d = tmp_path_factory.mktemp("splitter")
    cc = d / "split.cc"
    cc.write_text(_HARNESS_HEAD + _kaldi_functions(source.read_text()) + _HARNESS_MAIN)
    exe = d / "split"
    subprocess.run(["g++", "-O1", "-o", str(exe), str(cc)], check=True, capture_output=True)
    return exe


@pytest.mark.parametrize("num_frames,overlap,sf,lci,rcf,seed,max_len", [
    ("8", 0, 1, -1, -1, 1, 120), ("8,6", 0, 1, -1, -1, 2, 200),
    ("150,110,100", 0, 1, -1, -1, 3, 700), ("40,25,50", 10, 1, 0, 2, 4, 300),
    ("7,5", 0, 3, -1, -1, 5, 150), ("50,30", 20, 2, 3, -1, 7, 400), ("1", 0, 1, -1, -1, 9, 30)])
def test_splitter_matches_kaldi(kaldi_splitter: Path, num_frames: str, overlap: int, sf: int,
                                lci: int, rcf: int, seed: int, max_len: int) -> None:
    expected = subprocess.run([str(kaldi_splitter), num_frames, str(overlap), str(sf), str(lci),
                               str(rcf), str(seed), str(max_len)], check=True, capture_output=True,
                              text=True).stdout.splitlines()
    cfg = ExampleGenerationConfig(left_context=4, right_context=3, left_context_initial=lci,
                                  right_context_final=rcf, num_frames_overlap=overlap,
                                  frame_subsampling_factor=sf, num_frames_str=num_frames)
    with contextlib.redirect_stderr(io.StringIO()):
        cfg.compute_derived()
    splitter = UtteranceSplitter(cfg, seed=seed)
    ours = []
    for length in range(1, max_len + 1):
        chunks = splitter.get_chunks_for_utterance(length)
        ours.append(f"{length}:" + "".join(
            f" {c.first_frame}+{c.num_frames}/{c.left_context}/{c.right_context}"
            + "".join(",%.9g" % w for w in c.output_weights) for c in chunks))
    assert ours == expected


# ---------------------------------------------------------------------------
# NnetExampleStructureHasher (orders ExampleMerger's groups and statistics)

_HASH_HEAD = r"""
#include <vector>
#include <string>
#include <cstdio>
typedef int int32;
struct Index { int32 n, t, x; };
struct IndexVectorHasher { size_t operator()(const std::vector<Index> &v) const noexcept; };
struct GM { int r, c; int NumRows() const { return r; } int NumCols() const { return c; } };
struct NnetIo { std::string name; std::vector<Index> indexes; GM features; };
struct NnetExample { std::vector<NnetIo> io; };
struct NnetIoStructureHasher { size_t operator()(const NnetIo &a) const noexcept; };
struct NnetExampleStructureHasher { size_t operator()(const NnetExample &eg) const noexcept; };
"""

_HASH_MAIN = r"""
int main() {
  int nio;
  while (scanf("%d", &nio) == 1) {
    NnetExample eg; eg.io.resize(nio);
    for (auto &io : eg.io) {
      char buf[100]; int ni;
      scanf("%99s %d %d %d", buf, &io.features.r, &io.features.c, &ni);
      io.name = buf; io.indexes.resize(ni);
      for (auto &ix : io.indexes) scanf("%d %d %d", &ix.n, &ix.t, &ix.x);
    }
    printf("%zu\n", NnetExampleStructureHasher()(eg));
  }
}
"""


def test_structure_hash_matches_kaldi(tmp_path: Path) -> None:
    import numpy as np

    from pynnet3.train.egs import NnetExample, NnetIo, structure_hash

    files = [KALDI_SRC / "util" / "stl-utils.h", KALDI_SRC / "nnet3" / "nnet-common.cc",
             KALDI_SRC / "nnet3" / "nnet-example.cc"]
    if not all(f.is_file() for f in files) or shutil.which("g++") is None:
        pytest.skip("needs Kaldi's source (KALDI_SRC) and g++")
    stl, common, example = (f.read_text() for f in files)

    def function(src: str, start: str) -> str:
        a = src.index(start)
        return src[a:src.index("\n}\n", a)] + "\n}\n"

    a = stl.index("struct StringHasher")
    code = (_HASH_HEAD + stl[a:stl.index("};", a)] + "};\n"
            + function(common, "size_t IndexVectorHasher::operator ()")
            + function(example, "size_t NnetIoStructureHasher::operator ()")
            + function(example, "size_t NnetExampleStructureHasher::operator ()") + _HASH_MAIN)
    (tmp_path / "h.cc").write_text(code)
    subprocess.run(["g++", "-O1", "-o", str(tmp_path / "h"), str(tmp_path / "h.cc")],
                   check=True, capture_output=True)
    rng = np.random.default_rng(0)
    egs = []
    for i in range(40):
        ios = []
        for name in ("input", "ivector", "output-xent", "out\u00e9")[:1 + i % 4]:
            n = int(rng.integers(1, 60))
            ios.append(NnetIo(name, rng.integers(-3000, 3000, size=(n, 3)),
                              np.zeros((n, int(rng.integers(1, 5))), np.float32)))
        egs.append(NnetExample(ios))
    text = "".join(f"{len(e.io)}\n" + "".join(
        f"{io.name} {io.features.num_rows} {io.features.num_cols} {len(io.indexes)}\n"
        + " ".join(map(str, io.indexes.reshape(-1).tolist())) + "\n" for io in e.io) for e in egs)
    out = subprocess.run([str(tmp_path / "h")], input=text.encode(), check=True,
                         capture_output=True).stdout.decode().split()
    assert [int(v) for v in out] == [structure_hash(e) for e in egs]


# ---------------------------------------------------------------------------
# Kaldi's RandInt / WithProb on glibc rand() (nnet3-copy-egs --random,
# --keep-proportion, --frame=random; nnet3-shuffle-egs --buffer-size)

_RAND_HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <cassert>
typedef int int32;
typedef float BaseFloat;
struct RandomState;
#define KALDI_ASSERT(x) assert(x)
#define KALDI_COMPILE_TIME_ASSERT(x)
#define KALDI_ERR abort(), *(int*)0
static int Rand(RandomState * = 0) { return rand(); }
"""


def test_rand_helpers_match_kaldi(tmp_path: Path) -> None:
    from pynnet3.train.kaldi_random import GlibcRand

    src = KALDI_SRC / "base" / "kaldi-math.cc"
    if not src.is_file() or shutil.which("g++") is None:
        pytest.skip("needs Kaldi's source (KALDI_SRC) and g++")
    text = src.read_text()

    def function(start: str) -> str:
        a = text.index(start)
        return text[a:text.index("\n}\n", a)] + "\n}\n"

    code = (_RAND_HARNESS
            + function("bool WithProb(BaseFloat prob, struct RandomState* state)").replace(
                "struct RandomState* state", "RandomState* state = 0")
            + function("int32 RandInt(int32 min_val, int32 max_val, struct RandomState* state)"
                       ).replace("struct RandomState* state", "RandomState* state = 0")
            + r"""
int main(int argc, char **argv) {
  srand(atoi(argv[1]));
  for (int i = 0; i < 300; i++) {
    printf("%d ", RandInt(-3, 17 + i % 5));
    printf("%d ", (int)WithProb(0.3f + 0.002f * i));
    printf("%d\n", (int)WithProb(1e-7f * (i % 7)));
  }
}
""")
    (tmp_path / "r.cc").write_text(code)
    subprocess.run(["g++", "-O1", "-o", str(tmp_path / "r"), str(tmp_path / "r.cc")],
                   check=True, capture_output=True)
    for seed in (0, 1, 77):
        out = subprocess.run([str(tmp_path / "r"), str(seed)], check=True, capture_output=True,
                             text=True).stdout.splitlines()
        g = GlibcRand(seed)
        ours = []
        for i in range(300):
            a = g.rand_int(-3, 17 + i % 5)
            b = int(g.with_prob(float(np.float32(0.3) + np.float32(0.002) * np.float32(i))))
            c = int(g.with_prob(float(np.float32(1e-7) * np.float32(i % 7))))
            ours.append(f"{a} {b} {c}")
        assert ours == out
