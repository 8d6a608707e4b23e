"""Convolution, attention and combined components: config, I/O, Info(),
compiler hooks and forward pass, checked against real Kaldi outputs."""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from pynnet3.errors import ConfigError, FormatError
from pynnet3.io.kaldi_io import KaldiReader, KaldiWriter
from pynnet3.nnet.components.attention import RestrictedAttentionComponent
from pynnet3.nnet.components.base import (Prop, new_component_of_type, read_component,
                                          set_random_seed)
from pynnet3.nnet.components.composite import CompositeComponent
from pynnet3.nnet.components.recurrent import (GruNonlinearityComponent,
                                               LstmNonlinearityComponent,
                                               OutputGruNonlinearityComponent)
from pynnet3.nnet.components.convolution import (ConvolutionComponent, MaxpoolingComponent,
                                                 TimeHeightConvolutionComponent)
from pynnet3.nnet.config_line import ConfigLine
from pynnet3.nnet.index import K_NO_TIME, Index

REF = Path("/work/shared/reference")
TYPES = {"TimeHeightConvolutionComponent", "ConvolutionComponent", "MaxpoolingComponent",
         "RestrictedAttentionComponent", "LstmNonlinearityComponent",
         "GruNonlinearityComponent", "OutputGruNonlinearityComponent", "CompositeComponent"}

needs_ref = pytest.mark.skipif(not REF.is_dir(), reason="/work/shared/reference not present")


# ---------------------------------------------------------------------------
# helpers


def make(cls, line: str):
    set_random_seed(3)
    c = cls()
    cfl = ConfigLine(f"component name=x type={cls.type_name} {line}", "test.config", 1)
    cfl.get_str("name")
    cfl.get_str("type")
    c.init_from_config(cfl)
    cfl.check_all_used("component")
    return c


def write_bytes(c, binary: bool) -> bytes:
    w = KaldiWriter(binary)
    c.write(w)
    return w.getvalue()


def read_bytes(data: bytes, binary: bool):
    return read_component(KaldiReader(data, binary, "test"))


def assert_round_trip(c) -> None:
    for binary in (True, False):
        data = write_bytes(c, binary)
        c2 = read_bytes(data, binary)
        assert type(c2) is type(c)
        assert write_bytes(c2, binary) == data
        assert c2.info() == c.info() or not binary  # text rounds floats to 7 digits
        assert c2.input_dim() == c.input_dim() and c2.output_dim() == c.output_dim()


def component_lines(path: Path) -> list[tuple[str, str, str]]:
    """(name, type, whole line) of the component lines of our types."""
    out = []
    for line in open(path, encoding="utf-8"):
        m = re.match(r"component name=(\S+) type=(\w+)", line)
        if m and m.group(2) in TYPES:
            out.append((m.group(1), m.group(2), line.rstrip("\n")))
    return out


def component_span(data: bytes, name: str) -> tuple[int, int]:
    key = b"<ComponentName> " + name.encode() + b" "
    pos = data.find(key)
    assert pos >= 0, name
    body = pos + len(key)
    ends = [e for e in (data.find(b"<ComponentName> ", body), data.find(b"</Nnet3>", body))
            if e >= 0]
    return body, min(ends)


def reference_cases():
    """(model file, info file) pairs: random/* final models and small/* trained ones."""
    cases = []
    for d in sorted((REF / "random").glob("*")):
        for fn in ("final.raw", "final.txt.raw"):
            if (d / fn).exists() and (d / "nnet-info.txt").exists():
                cases.append((d / fn, d / "nnet-info.txt"))
    for d in sorted((REF / "small").glob("*")):
        for fn in ("1.raw", "1.txt.raw"):
            if (d / fn).exists() and (d / "nnet3-info.txt").exists():
                cases.append((d / fn, d / "nnet3-info.txt"))
    return cases


def _mask_stats(text: str) -> str:
    """Hide the statistics of random parameters (Kaldi's generator differs)."""
    text = re.sub(r"-rms=[^,\s}]+", "-rms=X", text)
    return re.sub(r"-\{mean,stddev\}=[^,]+,[^,\s}]+", "-{mean,stddev}=X", text)


def _subtypes_available(line: str) -> bool:
    return all(new_component_of_type(t) is not None for t in re.findall(r"type=(\w+)", line))


# ---------------------------------------------------------------------------
# Kaldi reference models: Info() and byte-exact re-writing


@needs_ref
def test_reference_models_info_and_bytes():
    counts: dict[str, int] = {}
    info_bad, bytes_bad, skipped = [], [], []
    stats_ulp_only = 0
    for model, info in reference_cases():
        data = model.read_bytes()
        binary = data.startswith(b"\0B")
        for name, typ, line in component_lines(info):
            if not _subtypes_available(line):
                skipped.append((model, name))
                continue
            start, end = component_span(data, name)
            comp = read_component(KaldiReader(data, binary, str(model), start))
            got_info = f"component name={name} type=" + comp.info()
            if got_info != line:
                info_bad.append((str(model), name, got_info[:300], line[:300]))
            want = data[start:end]
            got = write_bytes(comp, binary) + (b"" if binary else b"\n")
            if got != want:
                # Trained LSTM stats: Kaldi keeps sums in memory and writes
                # sum * (1/count); reading back the averages and writing them
                # again moves some values by an ulp (in Kaldi too).
                if (typ == "LstmNonlinearityComponent" and binary and len(got) == len(want)
                        and _lstm_differs_only_in_stats(got, want)):
                    stats_ulp_only += 1
                else:
                    bytes_bad.append((str(model), name))
            counts[typ] = counts.get(typ, 0) + 1
    print("checked:", counts, "skipped (sub-types missing):", len(skipped),
          "lstm stats ulp-only:", stats_ulp_only)
    assert not info_bad, info_bad[:3]
    assert not bytes_bad, bytes_bad[:5]
    for typ in ("TimeHeightConvolutionComponent", "ConvolutionComponent", "MaxpoolingComponent",
                "RestrictedAttentionComponent", "LstmNonlinearityComponent"):
        assert counts.get(typ, 0) > 0, typ


def _lstm_differs_only_in_stats(got: bytes, want: bytes) -> bool:
    a = read_bytes(got, True)
    b = read_bytes(want, True)
    if write_bytes(a, True).split(b"<ValueAvg>")[0] != want.split(b"<ValueAvg>")[0]:
        return False
    if a.count != b.count or not np.array_equal(a.self_repair_config, b.self_repair_config):
        return False
    for x, y in ((a.value_sum, b.value_sum), (a.deriv_sum, b.deriv_sum)):
        xa = (x.astype(np.float32) * np.float32(1.0 / a.count))
        ya = (y.astype(np.float32) * np.float32(1.0 / b.count))
        np.testing.assert_array_max_ulp(xa, ya, maxulp=2)
    return True


@needs_ref
def test_config_init_matches_kaldi_info_structure():
    """Initialising from the Kaldi configs gives Kaldi's Info() apart from the
    statistics of the random parameters."""
    checked = 0
    sources = []
    for d in sorted((REF / "random").glob("*")):
        if (d / "nnet-info.txt").exists():
            sources.append((sorted(d.glob("config*.txt")), d / "nnet-info.txt"))
    for d in sorted((REF / "configs").glob("*")):
        if (d / "kaldi-nnet3-info.txt").exists():
            sources.append(([d / "ref.config"], d / "kaldi-nnet3-info.txt"))
    for configs, info in sources:
        lines = {}
        for cfg in configs:
            for raw in cfg.read_text().splitlines():
                raw = raw.split("#", 1)[0].strip()
                if raw.startswith("component ") and "type=" in raw:
                    cfl = ConfigLine(raw, str(cfg), 0)
                    lines[cfl.get_str("name")] = raw
        for name, typ, want in component_lines(info):
            if name not in lines or not _subtypes_available(lines[name]):
                continue
            cfl = ConfigLine(lines[name], "cfg", 0)
            cfl.get_str("name")
            comp = new_component_of_type(cfl.get_str("type"))
            set_random_seed(0)
            comp.init_from_config(cfl)
            cfl.check_all_used("component")
            got = f"component name={name} type=" + comp.info()
            assert _mask_stats(got) == _mask_stats(want), (name, got[:400], want[:400])
            checked += 1
    print("config-initialised components checked:", checked)
    assert checked >= 20


def _parse_index_list(text: str) -> list[Index]:
    out = []
    for m in re.finditer(r"\((-?\d+),(-?\d+)(?::(-?\d+))?(?:,(-?\d+))?\)", text):
        n, t0, x = int(m.group(1)), int(m.group(2)), int(m.group(4) or 0)
        t1 = int(m.group(3)) if m.group(3) else t0
        out.extend(Index(n, t, x) for t in range(t0, t1 + 1))
    return out


def _computation_matrix_indexes(text: str) -> dict[str, list[Index]]:
    """Row Indexes of the matrices of a printed computation (not the
    abbreviated ones)."""
    return {m.group(1): _parse_index_list(m.group(2))
            for m in re.finditer(r"^(m\d+) == value: [^\[]*(\[.*\])$", text, re.M)
            if "..." not in m.group(2)}


_MAT = r"(m\d+)(?:\((\d+):(\d+), (\d+):(\d+)\))?"


def _run_printed_computation(d: Path) -> tuple[np.ndarray, np.ndarray, set] | None:
    """Run the forward commands of Kaldi's printed computation with our
    components; None if it uses something this small interpreter lacks."""
    kaldiio = pytest.importorskip("kaldiio")
    text = (d / "computation.txt").read_text()
    lists = _computation_matrix_indexes(text)
    data = (d / "final.raw").read_bytes()
    io = dict(kaldiio.load_ark(str(d / "io.ark")))
    comps: dict = {}
    mats: dict = {}
    idx: dict = {}

    def view(m):
        name, r0, r1, c0, c1 = m
        if r0 is None:
            return mats[name], idx[name]
        return (mats[name][int(r0):int(r1) + 1, int(c0):int(c1) + 1],
                idx[name][int(r0):int(r1) + 1])

    fwd = text.split("# begin forward commands")[1].split("segment separator")[0]
    for line in fwd.strip().split("\n"):
        cmd = line.split(": ", 1)[1] if ": " in line else line
        if m := re.match(r"(m\d+) = user input \[for node: '(\S+)'\]", cmd):
            mats[m.group(1)] = io["in_" + m.group(2)].astype(np.float32).copy()
            idx[m.group(1)] = lists[m.group(1)]
        elif m := re.match(r"(m\d+) = undefined\((\d+),(\d+)\)", cmd):
            mats[m.group(1)] = np.full((int(m.group(2)), int(m.group(3))), np.nan, np.float32)
            idx[m.group(1)] = list(lists.get(m.group(1), [None] * int(m.group(2))))
        elif m := re.match(r"(m\d+) = " + _MAT + "$", cmd):
            mats[m.group(1)], idx[m.group(1)] = view(m.groups()[1:])
        elif m := re.match(r"(m\d+)\.set\(0\)", cmd):
            mats[m.group(1)][...] = 0.0
        elif m := re.match(r"(m\d+)\.CopyRows\(1, (m\d+)\[([-\d, ]+)\]\)$", cmd):
            a, b = m.group(1), m.group(2)
            for i, row in enumerate(int(v) for v in m.group(3).split(",")):
                if row >= 0:
                    mats[a][i] = mats[b][row]
                    idx[a][i] = idx[b][row]
        elif m := re.match(r"(\S+)\.Propagate\((NULL|precomputed_indexes\[\d+\]), " + _MAT
                           + ", &" + _MAT + r"\)$", cmd):
            name = m.group(1)
            if name not in comps:
                start, _ = component_span(data, name)
                comps[name] = read_component(KaldiReader(data, True, str(d), start))
            comp = comps[name]
            x, x_idx = view(m.groups()[2:7])
            y, y_idx = view(m.groups()[7:12])
            pre = None
            if m.group(2) != "NULL":
                if m.group(8) not in lists:
                    return None
                pre = comp.precompute_indexes(None, [ix for ix in x_idx if ix is not None],
                                              lists[m.group(8)], False)
            else:
                # simple component: output rows have the input rows' Indexes
                r0 = int(m.group(9) or 0)
                idx[m.group(8)][r0:r0 + len(x_idx)] = x_idx
            try:
                comp.propagate(pre, x, y)
            except NotImplementedError:
                return None
        elif m := re.match(r"output (m\d+) to user", cmd):
            return mats[m.group(1)], io["out_output"], {c.type_name for c in comps.values()}
        elif not (cmd.startswith("[no-op") or cmd.startswith("#") or re.match(r"m\d+ = \[\]", cmd)):
            return None
    return None


@needs_ref
def test_forward_matches_kaldi_on_random_networks():
    """Kaldi's own forward outputs (io.ark) of the random test networks that
    use our components, recomputed by replaying the printed computation."""
    ran: dict[str, int] = {}
    for d in sorted((REF / "random").glob("[0-9]*")):
        if not re.search(r"type=(TimeHeight|RestrictedAtt|Convolution|Maxpool|Composite)",
                          (d / "nnet-info.txt").read_text()):
            continue
        res = _run_printed_computation(d)
        if res is None:
            continue
        got, want, types = res
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max(),
                                   err_msg=str(d))
        for t in types & TYPES:
            ran[t] = ran.get(t, 0) + 1
    print("networks run per type:", ran)
    for t in ("TimeHeightConvolutionComponent", "RestrictedAttentionComponent",
              "ConvolutionComponent", "CompositeComponent"):
        assert ran.get(t, 0) >= 1, (t, ran)


@needs_ref
def test_reorder_indexes_match_kaldi_computations():
    """Our reordered (and blank-padded) Indexes are those of Kaldi's
    compiled computations."""
    checked = 0
    for d in sorted((REF / "random").glob("[0-9]*")):
        text = (d / "computation.txt").read_text()
        lists = _computation_matrix_indexes(text)
        data = (d / "final.raw").read_bytes()
        for m in re.finditer(r"(\S+)\.Propagate\(precomputed_indexes\[\d+\], (m\d+), &(m\d+)\)",
                             text):
            name, a, b = m.groups()
            if a not in lists or b not in lists:
                continue
            start, _ = component_span(data, name)
            comp = read_component(KaldiReader(data, True, str(d), start))
            if comp.type_name not in TYPES:
                continue
            ins = [ix for ix in lists[a] if ix.t != K_NO_TIME]
            outs = [ix for ix in lists[b] if ix.t != K_NO_TIME]
            new_in, new_out = comp.reorder_indexes(ins[::-1], outs[::-1])
            assert new_in == lists[a] and new_out == lists[b], (d, name)
            pre = comp.precompute_indexes(None, new_in, new_out, False)
            assert pre is not None
            checked += 1
    print("reorderings checked:", checked)
    assert checked >= 8


# ---------------------------------------------------------------------------
# TimeHeightConvolutionComponent


def test_time_height_conv_config_and_io():
    c = make(TimeHeightConvolutionComponent,
             "num-filters-in=3 num-filters-out=6 height-in=12 height-out=10 "
             "height-offsets=0,1,2 time-offsets=-1,0,1 required-time-offsets=-1 "
             "use-natural-gradient=false rank-out=4 alpha-in=2.0 max-change=0.5")
    assert (c.input_dim(), c.output_dim()) == (36, 60)
    assert c.num_parameters() == 6 * 27 + 6
    assert c.properties() == (Prop.UPDATABLE | Prop.REORDERS_INDEXES | Prop.BACKPROP_ADDS
                              | Prop.BACKPROP_NEEDS_INPUT | Prop.INPUT_CONTIGUOUS
                              | Prop.OUTPUT_CONTIGUOUS)
    assert (c.rank_in, c.rank_out, c.alpha_in, c.alpha_out) == (14, 4, 2.0, 4.0)
    assert "required-time-offsets=[-1]" in c.info() and "use-natural-gradient=0" in c.info()
    assert_round_trip(c)
    # 'offsets' form, default required offsets = all, init-unit
    c2 = make(TimeHeightConvolutionComponent,
              "num-filters-in=2 num-filters-out=2 height-in=4 height-out=4 "
              "offsets=1,0;0,0;0,-1;0,1;-1,0 init-unit=true")
    assert c2.model.offsets == [(-1, 0), (0, -1), (0, 0), (0, 1), (1, 0)]
    assert c2.model.required_time_offsets == {-1, 0, 1}
    block = c2.linear_params[:, 4:6]
    assert np.array_equal(block, np.eye(2, dtype=np.float32))
    assert np.count_nonzero(c2.linear_params) == 2
    assert "alpha=4" in c2.info() and "rank-in=6" in c2.info()
    assert_round_trip(c2)


@pytest.mark.parametrize("line", [
    "num-filters-in=3 num-filters-out=6 height-in=12 height-out=10",        # no offsets
    "num-filters-in=3 num-filters-out=6 height-in=12 height-out=10 offsets=0,0;0,0",
    "num-filters-in=3 num-filters-out=6 height-in=4 height-out=10 height-offsets=0 "
    "time-offsets=0 required-time-offsets=1",                                # not a subset
    "num-filters-in=3 num-filters-out=6 height-in=12 height-out=10 height-offsets=0 "
    "time-offsets=0 init-unit=true",                                        # filters differ
    "num-filters-in=3 num-filters-out=3 height-in=2 height-out=2 height-offsets=5 time-offsets=0",
])
def test_time_height_conv_bad_configs(line):
    with pytest.raises(ConfigError):
        make(TimeHeightConvolutionComponent, line)


def test_time_height_conv_hooks():
    c = make(TimeHeightConvolutionComponent,
             "num-filters-in=1 num-filters-out=1 height-in=3 height-out=3 height-offsets=-1,0,1 "
             "time-offsets=-2,0,2 required-time-offsets=0")
    assert c.get_input_indexes(None, Index(1, 10, 0)) == [Index(1, 8), Index(1, 10), Index(1, 12)]
    ok, used = c.is_computable(None, Index(0, 5, 0), {Index(0, 5), Index(0, 7)})
    assert ok and used == [Index(0, 5), Index(0, 7)]
    ok, used = c.is_computable(None, Index(0, 5, 0), {Index(0, 3), Index(0, 7)})
    assert not ok and used == []


def _direct_conv(c, inputs: dict, n: int, t: int) -> np.ndarray:
    """Straightforward convolution for one output frame; missing inputs are 0."""
    m = c.model
    nfi, nfo = m.num_filters_in, m.num_filters_out
    out = np.tile(c.bias_params.astype(np.float64), m.height_out)
    for ho in range(m.height_out):
        for i, (dt, dh) in enumerate(m.offsets):
            hi = ho * m.height_subsample_out + dh
            frame = inputs.get((n, t + dt))
            if frame is None or not 0 <= hi < m.height_in:
                continue
            w = c.linear_params[:, i * nfi:(i + 1) * nfi].astype(np.float64)
            out[ho * nfo:(ho + 1) * nfo] += w @ frame[hi * nfi:(hi + 1) * nfi]
    return out


@pytest.mark.parametrize("line,t_in,t_out", [
    # padding in height and (non-required) time
    ("num-filters-in=2 num-filters-out=3 height-in=5 height-out=5 height-offsets=-1,0,1 "
     "time-offsets=-1,0,1 required-time-offsets=0", range(0, 6), range(0, 6)),
    # height subsampling, time offsets with gaps
    ("num-filters-in=3 num-filters-out=2 height-in=6 height-out=3 height-subsample-out=2 "
     "height-offsets=0,1 time-offsets=-2,0,2", range(-2, 9), range(0, 7)),
    # time subsampling: input step 1, output step 3 (appended input frames)
    ("num-filters-in=2 num-filters-out=2 height-in=4 height-out=4 height-offsets=-1,0,1 "
     "time-offsets=-1,0,1 max-memory-mb=0.0001", range(-1, 11), range(0, 10, 3)),
])
def test_time_height_conv_forward(line, t_in, t_out):
    c = make(TimeHeightConvolutionComponent, line + " bias-stddev=0.5")
    rs = np.random.RandomState(0)
    in_idx = [Index(n, t) for t in t_in for n in range(2)]
    out_idx = [Index(n, t) for t in t_out for n in range(2)]
    new_in, new_out = c.reorder_indexes(in_idx, out_idx)
    assert set(in_idx) <= set(new_in) and set(out_idx) <= set(new_out)
    assert all(ix.t == K_NO_TIME for ix in new_in if ix not in set(in_idx))
    pre = c.precompute_indexes(None, new_in, new_out, False)
    frames = {(ix.n, ix.t): rs.randn(c.input_dim()).astype(np.float32) for ix in in_idx}
    x = np.stack([frames.get((ix.n, ix.t), np.zeros(c.input_dim(), np.float32))
                  if ix.t != K_NO_TIME else np.zeros(c.input_dim(), np.float32)
                  for ix in new_in])
    y = np.full((len(new_out), c.output_dim()), np.nan, dtype=np.float32)
    c.propagate(pre, x, y)
    for row, ix in enumerate(new_out):
        if ix.t == K_NO_TIME:
            continue
        np.testing.assert_allclose(y[row], _direct_conv(c, frames, ix.n, ix.t),
                                   rtol=1e-4, atol=1e-4)
    # precomputed indexes serialise
    w = KaldiWriter(False)
    pre.write(w)
    assert b"<ConvComputation>" in w.getvalue()


# ---------------------------------------------------------------------------
# ConvolutionComponent / MaxpoolingComponent


def test_convolution_component():
    c = make(ConvolutionComponent, "input-x-dim=5 input-y-dim=6 input-z-dim=2 filt-x-dim=3 "
                                   "filt-y-dim=2 filt-x-step=2 filt-y-step=2 num-filters=4 "
                                   "input-vectorization-order=yzx learning-rate=0.01")
    assert (c.input_dim(), c.output_dim(), c.num_parameters()) == (60, 2 * 3 * 4, 4 * 13)
    assert c.properties() == (Prop.SIMPLE | Prop.UPDATABLE | Prop.BACKPROP_NEEDS_INPUT
                              | Prop.BACKPROP_ADDS | Prop.PROPAGATE_ADDS)
    assert "input-vectorization=0, num-filters=4" in c.info()
    assert_round_trip(c)
    # Kaldi's reader accepts a file without <IsGradient>
    data = write_bytes(c, False).replace(b"<IsGradient> F ", b"")
    assert write_bytes(read_bytes(data, False), False) == write_bytes(c, False)
    # forward vs direct loops (the op adds to the output)
    rs = np.random.RandomState(1)
    x = rs.randn(3, 60).astype(np.float32)
    y = np.ones((3, 24), dtype=np.float32)
    c.propagate(None, x, y)
    for vec in (0, 1):
        c.input_vectorization = vec
        y = np.zeros((3, 24), dtype=np.float32)
        c.propagate(None, x, y)
        for r in range(3):
            for xs in range(2):
                for ys in range(3):
                    patch = []
                    for fx in range(3):
                        for fy in range(2):
                            for z in range(2):
                                xx, yy = xs * 2 + fx, ys * 2 + fy
                                col = (xx * 12 + yy * 2 + z) if vec == 1 else (xx * 12 + z * 6 + yy)
                                patch.append(x[r, col])
                    want = c.filter_params @ np.array(patch) + c.bias_params
                    p = xs * 3 + ys
                    np.testing.assert_allclose(y[r, p * 4:(p + 1) * 4], want, rtol=1e-5,
                                               atol=1e-5)


def test_maxpooling_component():
    c = make(MaxpoolingComponent, "input-x-dim=4 input-y-dim=5 input-z-dim=6 pool-x-size=2 "
                                  "pool-y-size=3 pool-z-size=2 pool-x-step=2 pool-y-step=1 "
                                  "pool-z-step=2")
    assert (c.input_dim(), c.output_dim(), c.num_parameters()) == (120, 2 * 3 * 3, 0)
    assert c.properties() == (Prop.SIMPLE | Prop.BACKPROP_NEEDS_INPUT
                              | Prop.BACKPROP_NEEDS_OUTPUT | Prop.BACKPROP_ADDS)
    assert c.info() == ("MaxpoolingComponent, input-x-dim=4, input-y-dim=5, input-z-dim=6, "
                        "pool-x-size=2, pool-y-size=3, pool-z-size=2, pool-x-step=2, "
                        "pool-y-step=1, pool-z-step=2")
    assert_round_trip(c)
    x = np.random.RandomState(2).randn(4, 120).astype(np.float32)
    y = np.zeros((4, 18), dtype=np.float32)
    c.propagate(None, x, y)
    t = x.reshape(4, 4, 5, 6)          # zyx vectorisation: x major, z minor
    for px in range(2):
        for py in range(3):
            for pz in range(3):
                want = t[:, px * 2:px * 2 + 2, py:py + 3, pz * 2:pz * 2 + 2].max(axis=(1, 2, 3))
                assert np.array_equal(y[:, (px * 3 + py) * 3 + pz], want)
    with pytest.raises(ConfigError):
        make(MaxpoolingComponent, "input-x-dim=4 input-y-dim=5 input-z-dim=6 pool-x-size=3 "
                                  "pool-y-size=3 pool-z-size=2 pool-x-step=2 pool-y-step=1 "
                                  "pool-z-step=2")


# ---------------------------------------------------------------------------
# RestrictedAttentionComponent


def test_attention_config_io_hooks():
    c = make(RestrictedAttentionComponent, "num-heads=2 key-dim=4 value-dim=3 time-stride=2 "
                                           "num-left-inputs=2 num-right-inputs=1 "
                                           "num-left-inputs-required=1 output-context=false")
    assert c.context_dim == 4
    assert (c.input_dim(), c.output_dim()) == (2 * (4 + 3 + 4 + 4), 2 * 3)
    assert c.properties() == (Prop.REORDERS_INDEXES | Prop.BACKPROP_NEEDS_INPUT
                              | Prop.PROPAGATE_ADDS | Prop.BACKPROP_ADDS | Prop.STORES_STATS
                              | Prop.USES_MEMO)
    assert "key-scale=0.5" in c.info() and "num-right-inputs-required=1" in c.info()
    assert_round_trip(c)
    assert c.get_input_indexes(None, Index(0, 10)) == [Index(0, t) for t in (6, 8, 10, 12)]
    avail = {Index(0, 8), Index(0, 10), Index(0, 12)}
    assert c.is_computable(None, Index(0, 10), avail) == (True, sorted(avail))
    assert c.is_computable(None, Index(0, 10), avail - {Index(0, 12)})[0] is False
    with pytest.raises(ConfigError):
        make(RestrictedAttentionComponent, "key-dim=4 value-dim=3 num-left-inputs=0 "
                                           "num-right-inputs=0")
    with pytest.raises(ConfigError):
        make(RestrictedAttentionComponent, "key-dim=4 value-dim=3 num-left-inputs=1 "
                                           "num-right-inputs=0 key-scale=2")


def test_attention_forward_and_stats():
    c = make(RestrictedAttentionComponent, "num-heads=2 key-dim=3 value-dim=2 time-stride=1 "
                                           "num-left-inputs=2 num-right-inputs=1 "
                                           "num-left-inputs-required=0 "
                                           "num-right-inputs-required=0")
    rs = np.random.RandomState(4)
    in_idx = [Index(n, t) for n in range(2) for t in range(0, 6)]
    out_idx = [Index(n, t) for n in range(2) for t in range(0, 6)]
    new_in, new_out = c.reorder_indexes(in_idx, out_idx)
    assert len(new_in) == 2 * 9 and new_in[0] == Index(0, K_NO_TIME)
    pre = c.precompute_indexes(None, new_in, new_out, False)
    frames = {(ix.n, ix.t): rs.randn(c.input_dim()).astype(np.float32) for ix in in_idx}
    zero = np.zeros(c.input_dim(), np.float32)
    x = np.stack([frames.get((ix.n, ix.t), zero) for ix in new_in])
    y = np.zeros((len(new_out), c.output_dim()), dtype=np.float32)
    memo = c.propagate(pre, x, y)
    cd, kd, vd = 4, 3, 2
    for row, ix in enumerate(new_out):
        for h in range(2):
            q = frames[(ix.n, ix.t)][h * 12 + kd + vd:(h + 1) * 12]
            ctx = [frames.get((ix.n, ix.t + o), zero)[h * 12:(h + 1) * 12] for o in range(-2, 2)]
            b = np.array([c.key_scale * q[:kd] @ f[:kd] for f in ctx]) + q[kd:]
            p = np.exp(b - b.max())
            p /= p.sum()
            want = sum(p[o] * ctx[o][kd:kd + vd] for o in range(cd))
            np.testing.assert_allclose(y[row, h * 6:h * 6 + 2], want, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(y[row, h * 6 + 2:h * 6 + 6], p, rtol=1e-5, atol=1e-6)
    for _ in range(6):
        c.store_stats(x, y, memo)
    assert c.stats_count > 0 and c.posterior_stats.shape == (2, 4)
    assert "stats-count=" in c.info() and "posterior-stats[1]=" in c.info()
    np.testing.assert_allclose(c.posterior_stats.sum(axis=1), c.stats_count, rtol=1e-5)
    assert_round_trip(c)
    c.zero_stats()
    assert "entropy" not in c.info()


# ---------------------------------------------------------------------------
# LSTM / GRU nonlinearities


def _sig(v):
    return 1.0 / (1.0 + math.exp(-v))


def test_lstm_nonlinearity():
    c = make(LstmNonlinearityComponent, "cell-dim=4 max-change=0.75 learning-rate=0.002")
    assert (c.input_dim(), c.output_dim(), c.num_parameters()) == (20, 8, 12)
    assert c.properties() == Prop.SIMPLE | Prop.UPDATABLE | Prop.BACKPROP_NEEDS_INPUT
    assert np.allclose(c.self_repair_config, [.05, .05, .2, .05, .2] + [1e-5] * 5)
    assert "use-dropout=false" in c.info() and "m_t_tanh={ self-repair-lower-threshold=0.2" \
        in c.info()
    assert_round_trip(c)
    # forward vs a per-element reference, with dropout masks
    d = make(LstmNonlinearityComponent, "cell-dim=3 use-dropout=true param-stddev=0.5")
    assert d.input_dim() == 18
    assert b"<UseDropout>" in write_bytes(d, True)
    assert_round_trip(d)
    x = np.random.RandomState(5).randn(4, 18).astype(np.float32)
    x[:, 15:] = np.abs(x[:, 15:])
    y = np.zeros((4, 6), dtype=np.float32)
    d.propagate(None, x, y)
    for r in range(4):
        si, sf, so = x[r, 15:18]
        for j in range(3):
            ip, fp, cp, op, cprev = (float(x[r, k * 3 + j]) for k in range(5))
            wi, wf, wo = (float(d.params[k, j]) for k in range(3))
            i_t, f_t = _sig(ip + wi * cprev), _sig(fp + wf * cprev)
            c_t = f_t * sf * cprev + i_t * si * math.tanh(cp)
            m_t = _sig(op + wo * c_t) * so * math.tanh(c_t)
            assert y[r, j] == pytest.approx(c_t, rel=1e-5, abs=1e-6)
            assert y[r, 3 + j] == pytest.approx(m_t, rel=1e-5, abs=1e-6)
    # stats: written as averages, Info shows them once count > 0
    c.count = 10.0
    c.value_sum[...] = 5.0
    c.deriv_sum[...] = 2.0
    c.self_repair_total[...] = 4.0
    text = c.info()
    assert "count=10" in text and "self-repaired-proportion=0.1" in text
    back = read_bytes(write_bytes(c, True), True)
    assert np.allclose(back.value_sum, 5.0) and back.count == 10.0
    with pytest.raises(ConfigError):
        make(LstmNonlinearityComponent, "cell-dim=4 sigmoid-self-repair-threshold=0.3")


def test_gru_nonlinearities():
    g = make(GruNonlinearityComponent, "cell-dim=5 recurrent-dim=3 self-repair-scale=2e-05")
    assert (g.input_dim(), g.output_dim(), g.num_parameters()) == (3 * 5 + 2 * 3, 10, 15)
    assert g.properties() == (Prop.SIMPLE | Prop.UPDATABLE | Prop.BACKPROP_NEEDS_INPUT
                              | Prop.BACKPROP_NEEDS_OUTPUT | Prop.BACKPROP_ADDS)
    assert g.info().endswith("self-repair-threshold=0.2, self-repair-scale=2e-05, alpha=4, "
                             "rank-in=20, rank-out=80, update-period=4")
    assert_round_trip(g)
    rs = np.random.RandomState(6)
    x = rs.randn(3, g.input_dim()).astype(np.float32)
    y = np.zeros((3, 10), dtype=np.float32)
    g.propagate(None, x, y)
    z, r, hp, c1, s1 = x[:, :5], x[:, 5:8], x[:, 8:13], x[:, 13:18], x[:, 18:21]
    h = np.tanh(hp + (r * s1) @ g.w_h.T)
    np.testing.assert_allclose(y[:, :5], h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y[:, 5:], (1 - z) * h + z * c1, rtol=1e-5, atol=1e-6)
    # non-projected: s_{t-1} is c_{t-1}
    g2 = make(GruNonlinearityComponent, "cell-dim=4")
    assert g2.input_dim() == 16 and "recurrent-dim=4" in g2.info()
    x = rs.randn(2, 16).astype(np.float32)
    y = np.zeros((2, 8), dtype=np.float32)
    g2.propagate(None, x, y)
    h = np.tanh(x[:, 8:12] + (x[:, 4:8] * x[:, 12:16]) @ g2.w_h.T)
    np.testing.assert_allclose(y[:, :4], h, rtol=1e-5, atol=1e-6)
    with pytest.raises(ConfigError):
        make(GruNonlinearityComponent, "cell-dim=4 recurrent-dim=5")

    o = make(OutputGruNonlinearityComponent, "cell-dim=4 param-mean=1.0 param-stddev=0")
    assert np.array_equal(o.w_h, np.ones(4, np.float32))
    assert (o.input_dim(), o.output_dim(), o.num_parameters()) == (12, 8, 4)
    assert o.info().endswith("alpha=4, rank=8, update-period=10")
    assert_round_trip(o)
    x = rs.randn(3, 12).astype(np.float32)
    y = np.zeros((3, 8), dtype=np.float32)
    o.propagate(None, x, y)
    h = np.tanh(x[:, 4:8] + x[:, 8:12])
    np.testing.assert_allclose(y[:, :4], h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y[:, 4:], (1 - x[:, :4]) * h + x[:, :4] * x[:, 8:12], rtol=1e-5,
                               atol=1e-6)
    # stats round trip through the file (averages on disk)
    o.count, o.self_repair_total = 4.0, 2.0
    o.value_sum[...] = 2.0
    back = read_bytes(write_bytes(o, True), True)
    assert back.count == 4.0 and np.allclose(back.value_sum, 2.0)
    assert "self-repaired-proportion=0.125" in back.info()


# ---------------------------------------------------------------------------
# CompositeComponent


COMPOSITE_LINE = ("max-rows-process=2 num-components=2 "
                  "component1='type=ConvolutionComponent input-x-dim=4 input-y-dim=3 "
                  "input-z-dim=2 filt-x-dim=2 filt-y-dim=3 filt-x-step=1 filt-y-step=1 "
                  "num-filters=3' "
                  "component2='type=MaxpoolingComponent input-x-dim=3 input-y-dim=1 "
                  "input-z-dim=3 pool-x-size=3 pool-y-size=1 pool-z-size=1 pool-x-step=1 "
                  "pool-y-step=1 pool-z-step=1'")


def test_composite_component():
    c = make(CompositeComponent, COMPOSITE_LINE)
    conv, pool = c.components
    assert isinstance(conv, ConvolutionComponent) and isinstance(pool, MaxpoolingComponent)
    assert (c.input_dim(), c.output_dim()) == (24, 3)
    assert c.num_parameters() == conv.num_parameters() == 3 * 13
    assert c.properties() == (Prop.SIMPLE | Prop.BACKPROP_NEEDS_INPUT | Prop.UPDATABLE
                              | Prop.BACKPROP_NEEDS_OUTPUT | Prop.BACKPROP_ADDS)
    assert c.info() == ("CompositeComponent sub-component1 = { " + conv.info()
                        + " }, sub-component2 = { " + pool.info() + " }")
    assert_round_trip(c)
    data = write_bytes(c, False)
    assert data.startswith(b"<CompositeComponent> <LearningRate> 0.001 <MaxRowsProcess> 2 "
                           b"<NumComponents> 2 <ConvolutionComponent> ")
    # old files without a learning rate are accepted
    old = data.replace(b"<LearningRate> 0.001 ", b"")
    assert read_bytes(old, False).max_rows_process == 2
    # forward: chains the sub-components (in blocks of max-rows-process rows)
    x = np.random.RandomState(7).randn(5, 24).astype(np.float32)
    y = np.zeros((5, 3), dtype=np.float32)
    c.propagate(None, x, y)
    mid = np.zeros((5, 9), dtype=np.float32)
    conv.propagate(None, x, mid)
    want = np.zeros((5, 3), dtype=np.float32)
    pool.propagate(None, mid, want)
    np.testing.assert_allclose(y, want, rtol=1e-6)
    # learning rates reach the sub-components
    c.set_underlying_learning_rate(0.5)
    assert conv.learning_rate == 0.5
    c.scale(0.0)
    assert not conv.filter_params.any()


@pytest.mark.parametrize("line", [
    "num-components=1",
    "num-components=1 component1='type=NoSuchComponent dim=3'",
    "num-components=1 component1='type=CompositeComponent num-components=1'",
    "num-components=2 component1='type=MaxpoolingComponent input-x-dim=1 input-y-dim=1 "
    "input-z-dim=4 pool-x-size=1 pool-y-size=1 pool-z-size=2 pool-x-step=1 pool-y-step=1 "
    "pool-z-step=2' component2='type=LstmNonlinearityComponent cell-dim=2'",   # dims mismatch
    "num-components=1 component1='type=RestrictedAttentionComponent key-dim=2 value-dim=2 "
    "num-left-inputs=1 num-right-inputs=0'",                                   # not simple
])
def test_composite_bad_configs(line):
    with pytest.raises(ConfigError):
        make(CompositeComponent, line)


def test_bad_files_raise_format_error():
    c = make(MaxpoolingComponent, "input-x-dim=2 input-y-dim=2 input-z-dim=2 pool-x-size=2 "
                                  "pool-y-size=2 pool-z-size=2 pool-x-step=1 pool-y-step=1 "
                                  "pool-z-step=1")
    data = write_bytes(c, False).replace(b"<PoolZStep> 1", b"<PoolZStep> 5")
    with pytest.raises(FormatError):
        read_bytes(data, False)
    t = make(TimeHeightConvolutionComponent, "num-filters-in=1 num-filters-out=1 height-in=2 "
                                             "height-out=2 height-offsets=0 time-offsets=0")
    data = write_bytes(t, False).replace(b"[ 0,0 ]", b"[ 0;0 ]")
    with pytest.raises(FormatError):
        read_bytes(data, False)
