// Golden-making driver for pynnet3's tests of nnet3-am-init / -train-transitions /
// -adjust-priors.  It calls Kaldi's own library code (hmm/, tree/, matrix/, util/)
// and does, for the transition model and the prior vector, what those binaries do
// (they also carry an nnet, which this driver has no use for).
//
//   am_goldens rand-tree SEED N P NUM_PHONES CHAIN TREE_OUT TOPO_OUT TRANS_OUT
//     random tree (Kaldi's GenRandContextDependencyLarge after srand(SEED)) and a
//     topology whose phones have as many pdf-classes as the tree asks for
//     (CHAIN=1: pdf-class pairs (s, s+1) on states s, a "chain"-style topology);
//     writes the tree (binary), the topology (text) and TransitionModel(tree, topo).
//   am_goldens train-trans TRANS_IN ALI_RSPEC FLOOR MINCOUNT SHARE PRIOR_FLOOR TRANS_OUT PRIORS_OUT
//     Accumulate + MleUpdate as nnet3-am-train-transitions; the priors as its SetPriors.
//   am_goldens adjust-priors OLD_PRIORS POSTERIOR_VEC NEW_PRIORS_OUT
//     the renormalisation and diagnostics of nnet3-am-adjust-priors.
#include <sstream>
#include "base/kaldi-common.h"
#include "util/common-utils.h"
#include "hmm/transition-model.h"
#include "tree/context-dep.h"

using namespace kaldi;

static std::string MakeTopology(const std::vector<int32> &phones,
                                const std::vector<int32> &lengths, bool chain) {
  std::map<int32, std::vector<int32> > by_len;
  for (int32 p : phones) by_len[lengths[p]].push_back(p);
  std::ostringstream os;
  os << "<Topology>\n";
  int32 k = 0;
  for (auto &kv : by_len) {
    int32 len = kv.first;
    os << "<TopologyEntry>\n<ForPhones>\n";
    for (int32 p : kv.second) os << p << " ";
    os << "\n</ForPhones>\n";
    // Irregular probabilities, so that their logs exercise logf.
    float loop = 0.3f + 0.07f * (k++ % 9);
    if (chain && len > 1) {
      for (int32 s = 0; s + 1 < len; s++)
        os << "<State> " << s << " <ForwardPdfClass> " << s << " <SelfLoopPdfClass> " << (s + 1)
           << " <Transition> " << s << " " << loop << " <Transition> " << (s + 1) << " "
           << (1.0f - loop) << " </State>\n";
      os << "<State> " << (len - 1) << " </State>\n";
    } else {
      for (int32 s = 0; s < len; s++)
        os << "<State> " << s << " <PdfClass> " << s << " <Transition> " << s << " " << loop
           << " <Transition> " << (s + 1) << " " << (1.0f - loop) << " </State>\n";
      os << "<State> " << len << " </State>\n";
    }
    os << "</TopologyEntry>\n";
  }
  os << "</Topology>\n";
  return os.str();
}

int main(int argc, char *argv[]) {
  try {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "rand-tree" && argc == 10) {
      srand(atoi(argv[2]));
      int32 N = atoi(argv[3]), P = atoi(argv[4]), num_phones = atoi(argv[5]);
      bool chain = atoi(argv[6]) != 0;
      std::vector<int32> phones;
      for (int32 p = 1; p <= num_phones; p++) phones.push_back(p);
      std::vector<int32> lengths;
      ContextDependency *ctx_dep = GenRandContextDependencyLarge(phones, N, P, true, &lengths);
      WriteKaldiObject(*ctx_dep, argv[7], true);
      std::string topo_text = MakeTopology(phones, lengths, chain);
      { Output ko(argv[8], false); ko.Stream() << topo_text; }
      HmmTopology topo;
      std::istringstream is(topo_text);
      topo.Read(is, false);
      TransitionModel tm(*ctx_dep, topo);
      WriteKaldiObject(tm, argv[9], true);
      std::cout << "num-pdfs " << ctx_dep->NumPdfs() << " tstates " << tm.NumTransitionStates()
                << " tids " << tm.NumTransitionIds() << "\n";
      delete ctx_dep;
      return 0;
    }
    if (mode == "train-trans" && argc == 10) {
      TransitionModel tm;
      ReadKaldiObject(argv[2], &tm);
      MleTransitionUpdateConfig cfg;
      cfg.floor = atof(argv[4]);
      cfg.mincount = atof(argv[5]);
      cfg.share_for_pdfs = atoi(argv[6]) != 0;
      double prior_floor = atof(argv[7]);
      Vector<double> accs;
      tm.InitStats(&accs);
      SequentialInt32VectorReader reader(argv[3]);
      for (; !reader.Done(); reader.Next())
        for (int32 tid : reader.Value()) tm.Accumulate(1.0, tid, &accs);
      BaseFloat objf_impr, count;
      tm.MleUpdate(accs, cfg, &objf_impr, &count);
      KALDI_LOG << "Transition model update: average " << (objf_impr / count)
                << " log-like improvement per frame over " << count << " frames.";
      Vector<BaseFloat> pdf_counts(tm.NumPdfs());
      for (int32 tid = 1; tid < accs.Dim(); tid++)
        pdf_counts(tm.TransitionIdToPdf(tid)) += accs(tid);
      pdf_counts.Scale(1.0 / pdf_counts.Sum());
      pdf_counts.ApplyFloor(prior_floor);
      pdf_counts.Scale(1.0 / pdf_counts.Sum());
      WriteKaldiObject(tm, argv[8], true);
      WriteKaldiObject(pdf_counts, argv[9], true);
      return 0;
    }
    if (mode == "adjust-priors" && argc == 5) {
      Vector<BaseFloat> old_priors, post;
      ReadKaldiObject(argv[2], &old_priors);
      ReadKaldiObject(argv[3], &post);
      post.Scale(1.0 / post.Sum());
      if (old_priors.Dim() == 0) {
        KALDI_LOG << "Model did not previously have priors attached.";
      } else {
        Vector<BaseFloat> diff(post);
        diff.AddVec(-1.0, old_priors);
        diff.ApplyAbs();
        int32 i;
        diff.Max(&i);
        KALDI_LOG << "Adjusting priors: largest absolute difference was for pdf " << i << ", "
                  << old_priors(i) << " -> " << post(i);
        // K-L divergence from old to new, each normalised by its float sum.
        BaseFloat sp = old_priors.Sum(), sq = post.Sum();
        if (fabs(sp - 1.0) > 0.01 || fabs(sq - 1.0) > 0.01)
          KALDI_WARN << "KlDivergence: vectors are not close to being normalized " << sp
                     << ", " << sq;
        double kl = 0.0;
        for (int32 j = 0; j < post.Dim(); j++) {
          BaseFloat a = old_priors(j) / sp, b = post(j) / sq;
          kl += a * Log(a / b);
        }
        KALDI_LOG << "Adjusting priors: K-L divergence from old to new is "
                  << static_cast<BaseFloat>(kl);
      }
      WriteKaldiObject(post, argv[4], true);
      return 0;
    }
    std::cerr << "bad arguments\n";
    return 1;
  } catch (const std::exception &e) {
    std::cerr << e.what() << '\n';
    return -1;
  }
}
