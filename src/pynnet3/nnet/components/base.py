"""The Component interface, Kaldi's property flags and the type registry.

Every Kaldi component type is a subclass of :class:`Component` registered
under its Kaldi type name (``AffineComponent``).  A component knows:

* its configuration (:meth:`init_from_config`, Kaldi's ``InitFromConfig``),
* its file format (:meth:`read` / :meth:`write`, Kaldi's ``Read``/``Write``;
  ``read`` is called after the opening ``<TypeName>`` token was consumed),
* its summary line (:meth:`info`, the text of Kaldi's ``Info()``),
* its dims and property flags,
* and the hooks the compiler and executor use (``get_input_indexes``,
  ``is_computable``, ``reorder_indexes``, ``precompute_indexes``,
  ``propagate``, ``backprop``, ``store_stats`` ...).  Simple components use the
  defaults; their math is implemented in later stages.

Besides the base classes, this module holds what several families share:
the Info() statistics (:func:`summarize_vector`, :func:`print_parameter_stats`),
the random generator, and the readers of config options and optional fields
(:func:`split_ints`, :func:`read_vector_file`, :func:`read_common_then`,
:class:`InOutDimComponent`).
"""
from __future__ import annotations

import enum
import math
import os
from typing import Any, ClassVar

import numpy as np

from ...errors import ConfigError, FormatError
from ...io.kaldi_io import KaldiReader, KaldiWriter, open_kaldi_object
from ..config_line import ConfigLine, int32_error_detail, parse_int32


class Prop(enum.IntFlag):
    """Kaldi's ComponentProperties bit flags (same values)."""

    SIMPLE = 0x001
    UPDATABLE = 0x002
    PROPAGATE_IN_PLACE = 0x004
    PROPAGATE_ADDS = 0x008
    REORDERS_INDEXES = 0x010
    BACKPROP_ADDS = 0x020
    BACKPROP_NEEDS_INPUT = 0x040
    BACKPROP_NEEDS_OUTPUT = 0x080
    BACKPROP_IN_PLACE = 0x100
    STORES_STATS = 0x200
    INPUT_CONTIGUOUS = 0x400
    OUTPUT_CONTIGUOUS = 0x800
    USES_MEMO = 0x1000
    RANDOM = 0x2000


_REGISTRY: dict[str, type["Component"]] = {}


def register(cls: type["Component"]) -> type["Component"]:
    """Class decorator: make ``cls`` constructible by its Kaldi type name."""
    name = cls.type_name
    prev = _REGISTRY.get(name)
    # A module re-executed after a failed import registers the same class
    # again; only a *different* class with the same type name is an error.
    if not name or (prev is not None and (prev.__module__, prev.__qualname__)
                    != (cls.__module__, cls.__qualname__)):
        raise RuntimeError(f"component type {name!r} registered twice or unnamed")
    _REGISTRY[name] = cls
    return cls


# Each Kaldi component type and the module of this package that defines it
# (loaded on first use; tests/nnet check that this matches what the modules
# register).
COMPONENT_FAMILIES: dict[str, str] = {
    **dict.fromkeys(("AffineComponent", "BlockAffineComponent", "FixedAffineComponent",
                     "LinearComponent", "NaturalGradientAffineComponent",
                     "NaturalGradientRepeatedAffineComponent", "RepeatedAffineComponent"),
                    "affine"),
    **dict.fromkeys(("BackpropTruncationComponent", "ClipGradientComponent"),
                    "gradient_clipping"),
    **dict.fromkeys(("BatchNormComponent", "NormalizeComponent"), "normalization"),
    "CompositeComponent": "composite",
    **dict.fromkeys(("ConstantComponent", "ConstantFunctionComponent"), "constant"),
    **dict.fromkeys(("ConvolutionComponent", "MaxpoolingComponent",
                     "TimeHeightConvolutionComponent"), "convolution"),
    "DistributeComponent": "distribute",
    **dict.fromkeys(("DropoutComponent", "DropoutMaskComponent", "GeneralDropoutComponent",
                     "SpecAugmentTimeMaskComponent"), "dropout"),
    **dict.fromkeys(("ElementwiseProductComponent", "NaturalGradientPerElementScaleComponent",
                     "PerElementOffsetComponent", "PerElementScaleComponent",
                     "ScaleAndOffsetComponent"), "per_element"),
    **dict.fromkeys(("FixedBiasComponent", "FixedScaleComponent", "NoOpComponent",
                     "PermuteComponent", "SumBlockComponent", "SumGroupComponent"), "fixed"),
    **dict.fromkeys(("GruNonlinearityComponent", "LstmNonlinearityComponent",
                     "OutputGruNonlinearityComponent"), "recurrent"),
    **dict.fromkeys(("LogSoftmaxComponent", "PnormComponent", "RectifiedLinearComponent",
                     "SigmoidComponent", "SoftmaxComponent", "TanhComponent"),
                    "nonlinearities"),
    "RestrictedAttentionComponent": "attention",
    **dict.fromkeys(("StatisticsExtractionComponent", "StatisticsPoolingComponent"),
                    "statistics"),
    "TdnnComponent": "tdnn",
}


def _load_family(module: str) -> None:
    import importlib

    importlib.import_module(f"{__package__}.{module}")


def load_all_families() -> None:
    """Imports every component family (registers every type)."""
    for module in sorted(set(COMPONENT_FAMILIES.values())):
        _load_family(module)


def component_types() -> list[str]:
    """Every component type name (every family is loaded for it)."""
    load_all_families()
    return sorted(_REGISTRY)


def component_class(type_name: str) -> "type[Component] | None":
    """The class of a component type name, its family loaded if need be."""
    cls = _REGISTRY.get(type_name)
    if cls is None and type_name in COMPONENT_FAMILIES:
        _load_family(COMPONENT_FAMILIES[type_name])
        cls = _REGISTRY.get(type_name)
    return cls


def new_component_of_type(type_name: str) -> "Component | None":
    cls = component_class(type_name)
    return cls() if cls is not None else None


def read_component(r: KaldiReader) -> "Component":
    """Kaldi's Component::ReadNew: ``<TypeName>`` then the component's body."""
    token = r.read_token()
    if not (token.startswith("<") and token.endswith(">")):
        raise r.error(f"expected a component type token like <AffineComponent>, got {token[:40]}")
    type_name = token[1:-1]
    comp = new_component_of_type(type_name)
    if comp is None:
        raise r.error(f"unknown component type {type_name}")
    comp.read(r)
    return comp


# ---------------------------------------------------------------------------
# Formatting helpers shared by Info() implementations (Kaldi's nnet-parse.cc)


# Kaldi's Info() statistics are float arithmetic in C++, where an overflow is
# inf and inf - inf is NaN, silently: the helpers below compute the same
# values under this errstate, so that NumPy prints no RuntimeWarning for them.
def c_float_arithmetic() -> np.errstate:
    """A fresh ``np.errstate`` (one instance cannot be entered twice) letting
    overflow, inf - inf and x / 0 give inf and NaN silently, as in C++."""
    return np.errstate(over="ignore", invalid="ignore", divide="ignore")


def _c_nan(value: float) -> str | None:
    """glibc's spelling of a NaN ("-nan" when its sign bit is set, as for the
    x86 default NaN of inf - inf or 0/0), or None for a number.  Python spells
    every NaN "nan"."""
    if math.isnan(value):
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    return None


def fmt_g(value: float, precision: int = 6) -> str:
    """C++ ``operator<<`` of a float in default notation with ``precision``."""
    value = float(value)
    return _c_nan(value) or "%.*g" % (precision, value)


def fmt_bool(value: bool) -> str:
    """C++ ``operator<<`` of a bool with std::boolalpha (Kaldi's Info uses it)."""
    return "true" if value else "false"


def _print_float_succinctly(f: float) -> str:
    nan = _c_nan(f)
    if nan:
        return nan
    a = abs(f)
    if 10.0 <= a < 10000.0:
        return "%.0f" % f
    if a >= 0.995:
        return "%.1f" % f
    if a >= 0.01:
        return "%.2f" % f
    return "%.1g" % f


_PERCENTILES = (0, 1, 2, 5, 10, 20, 50, 80, 90, 95, 98, 99, 100)


# Kaldi computes these statistics with OpenBLAS's sdot (Sum() is a dot product
# with a stride-0 vector of ones).  Near-constant or near-zero-mean vectors make
# the printed stddev/mean depend on the exact summation order, so the helpers
# below reproduce OpenBLAS 0.3.21's x86-64 SkylakeX sdot kernel: unit-stride
# products accumulated with FMA in 4 x 16 float lanes per 64 elements, then
# folded to 4 x 8 lanes (32 elements per step), reduced in a fixed order, and
# the tail (n % 32) added in double; any other stride adds float pair sums to
# a double.  All functions work over the last axis.


def _fma_acc(acc: np.ndarray, prod: np.ndarray) -> np.ndarray:
    # float32 acc + exact float64 product, rounded once (as an FMA does, up
    # to very rare double-rounding cases).
    return (acc.astype(np.float64) + prod).astype(np.float32)


@c_float_arithmetic()
def blas_dot(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """OpenBLAS sdot with unit strides over the last axis (float32 result)."""
    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32)
    n = x.shape[-1]
    lead = x.shape[:-1]
    prod = x.astype(np.float64) * y.astype(np.float64)   # exact products
    n32 = n & ~31
    kernel = np.zeros(lead, dtype=np.float32)
    if n32:
        n64 = n32 & ~63
        acc8 = [np.zeros(lead + (8,), dtype=np.float32) for _ in range(4)]
        if n64:
            acc16 = [np.zeros(lead + (16,), dtype=np.float32) for _ in range(4)]
            for i in range(0, n64, 64):
                for k in range(4):
                    acc16[k] = _fma_acc(acc16[k], prod[..., i + 16 * k:i + 16 * k + 16])
            acc8 = [a[..., :8] + a[..., 8:] for a in acc16]
        for i in range(n64, n32, 32):
            for k in range(4):
                acc8[k] = _fma_acc(acc8[k], prod[..., i + 8 * k:i + 8 * k + 8])
        a = ((acc8[0] + acc8[1]) + acc8[2]) + acc8[3]
        h = a[..., :4] + a[..., 4:]
        kernel = (h[..., 0] + h[..., 1]) + (h[..., 2] + h[..., 3])
    tail = prod[..., n32:].astype(np.float32).astype(np.float64)
    total = np.cumsum(tail, axis=-1)[..., -1] if n > n32 else np.zeros(lead)
    return (total + kernel.astype(np.float64)).astype(np.float32)


@c_float_arithmetic()
def blas_dot_strided(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """OpenBLAS sdot with a non-unit stride (e.g. matrix columns, or Sum())."""
    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32)
    n = x.shape[-1]
    prod = x.astype(np.float64) * y.astype(np.float64)
    n2 = n & ~1
    # y0*x0 + y1*x1 is contracted to fma(y0, x0, y1*x1) in float.
    pairs = (prod[..., 0:n2:2] + prod[..., 1:n2:2].astype(np.float32)).astype(np.float32)
    terms = pairs.astype(np.float64)
    if n2 < n:
        terms = np.concatenate([terms, prod[..., n2:].astype(np.float32).astype(np.float64)],
                               axis=-1)
    if terms.shape[-1] == 0:
        return np.zeros(x.shape[:-1], dtype=np.float32)
    return np.cumsum(terms, axis=-1)[..., -1].astype(np.float32)


def blas_sum(x: np.ndarray) -> np.ndarray:
    """Kaldi's VectorBase::Sum() (a stride-0 dot product with 1.0)."""
    x = np.asarray(x, dtype=np.float32)
    return blas_dot_strided(x, np.ones_like(x))


def _fmt_stddev(var: np.float32, precision: int) -> str:
    # sqrt of a negative variance is -nan in C++ (glibc), printed as "-nan".
    if var < 0:
        return "-nan"
    return fmt_g(np.float32(math.sqrt(var)), precision)


@c_float_arithmetic()
def summarize_vector(vec: np.ndarray) -> str:
    """Kaldi's SummarizeVector: the values if fewer than 10, else percentiles."""
    v = np.asarray(vec, dtype=np.float32).reshape(-1)
    if v.shape[0] < 10:
        return "[ " + "".join(_print_float_succinctly(float(x)) + " " for x in v) + "]"
    d = np.float32(v.shape[0])
    mean = np.float32(blas_sum(v) / d)
    var = np.float32(np.float32(blas_dot(v, v) / d) - np.float32(mean * mean))
    s = np.sort(v)
    n = v.shape[0] - 1
    parts = []
    for i, p in enumerate(_PERCENTILES):
        parts.append(_print_float_succinctly(float(s[(n * p) // 100])))
        if i + 1 < len(_PERCENTILES):
            parts.append(" " if i in (3, 8) else ",")
    return ("[percentiles(0,1,2,5 10,20,50,80,90 95,98,99,100)=(" + "".join(parts)
            + f"), mean={fmt_g(mean, 3)}, stddev={_fmt_stddev(var, 3)}]")


def _sum_and_sumsq(x: np.ndarray) -> tuple[np.float32, np.float32]:
    """(Sum(), VecVec / TraceMatMat(x, x, kTrans)) as Kaldi computes them."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 2:
        # MatrixBase::Sum adds elements in row order in double; TraceMatMat
        # adds one sdot per row into a float.
        total = np.float32(np.cumsum(x.astype(np.float64).reshape(-1))[-1]) if x.size else \
            np.float32(0)
        row_dots = blas_dot(x, x)
        sumsq = np.cumsum(row_dots, dtype=np.float32)[-1] if row_dots.size else np.float32(0)
        return total, np.float32(sumsq)
    x = x.reshape(-1)
    return np.float32(blas_sum(x)), np.float32(blas_dot(x, x))


@c_float_arithmetic()
def print_parameter_stats(name: str, params: np.ndarray, include_mean: bool = False,
                          include_row_norms: bool = False,
                          include_column_norms: bool = False,
                          include_singular_values: bool = False) -> str:
    """Kaldi's PrintParameterStats for a vector or a matrix (returns the text)."""
    out = [f", {name}-"]
    p = np.asarray(params, dtype=np.float32)
    dim = np.float32(p.size)
    total, sumsq = _sum_and_sumsq(p)
    if include_mean:
        mean = np.float32(total / dim)
        var = np.float32(np.float32(sumsq / dim) - np.float32(mean * mean))
        out.append(f"{{mean,stddev}}={fmt_g(mean, 4)},{_fmt_stddev(var, 4)}")
    else:
        out.append(f"rms={_fmt_stddev(np.float32(sumsq / dim), 4)}")
    if p.ndim == 2:
        if include_row_norms:
            out.append(f", {name}-row-norms=" + summarize_vector(np.sqrt(blas_dot(p, p))))
        if include_column_norms:
            out.append(f", {name}-col-norms="
                       + summarize_vector(np.sqrt(blas_dot_strided(p.T, p.T))))
        if include_singular_values:
            sv = np.linalg.svd(p.astype(np.float64), compute_uv=False)
            out.append(f", {name}-singular-values=" + summarize_vector(sv))
    return "".join(out)


# ---------------------------------------------------------------------------


class Component:
    """Base of all components.  Subclasses set ``type_name`` and override."""

    type_name: ClassVar[str] = ""

    # -- identity and dims -------------------------------------------------
    def input_dim(self) -> int:
        raise NotImplementedError

    def output_dim(self) -> int:
        raise NotImplementedError

    def properties(self) -> int:
        raise NotImplementedError

    def is_updatable(self) -> bool:
        return bool(self.properties() & Prop.UPDATABLE)

    # -- configuration -------------------------------------------------------
    def init_from_config(self, cfl: ConfigLine) -> None:
        raise NotImplementedError

    def config_error(self, cfl: ConfigLine, message: str) -> ConfigError:
        return cfl.error(f"{self.type_name}: {message}")

    # -- I/O -------------------------------------------------------------------
    def read(self, r: KaldiReader) -> None:
        """Read the body; the opening ``<TypeName>`` token is already consumed."""
        raise NotImplementedError

    def write(self, w: KaldiWriter) -> None:
        """Write ``<TypeName> ... </TypeName>``."""
        raise NotImplementedError

    def opening_tag(self) -> str:
        return f"<{self.type_name}>"

    def closing_tag(self) -> str:
        return f"</{self.type_name}>"

    def expect_opening_or(self, r: KaldiReader, token: str) -> None:
        """Kaldi's ExpectOneOrTwoTokens(<TypeName>, token): the tag is optional."""
        r.expect_one_or_two_tokens(self.opening_tag(), token)

    # -- summary -----------------------------------------------------------
    def info(self) -> str:
        """Kaldi's Component::Info() default: type, input-dim, output-dim."""
        return f"{self.type_name}, input-dim={self.input_dim()}, output-dim={self.output_dim()}"

    def copy(self) -> "Component":
        import copy

        return copy.deepcopy(self)

    # -- parameters (updatable components override) ------------------------
    def num_parameters(self) -> int:
        return 0

    def scale(self, alpha: float) -> None:
        """Scale parameters (and stats, for components that store them)."""

    def add(self, alpha: float, other: "Component") -> None:
        """this += alpha * other (parameters, and stats where Kaldi adds them)."""

    def zero_stats(self) -> None:
        """Forget stored statistics (StoresStats components override)."""

    # -- compiler hooks (non-simple components override) --------------------
    def get_input_indexes(self, misc_info: Any, output_index: tuple) -> list[tuple]:
        """Indexes of the input needed to compute ``output_index``."""
        return [output_index]

    def is_computable(self, misc_info: Any, output_index: tuple,
                      input_index_set: Any) -> tuple[bool, list[tuple]]:
        """(computable, used input indexes) given which inputs are available.

        ``input_index_set`` supports ``in``.  Simple components need exactly
        the same index.
        """
        ok = output_index in input_index_set
        return ok, ([output_index] if ok else [])

    def reorder_indexes(self, input_indexes: list[tuple],
                        output_indexes: list[tuple]) -> tuple[list[tuple], list[tuple]]:
        return input_indexes, output_indexes

    def get_input_index_offsets(self) -> list[tuple[int, int, int]] | None:
        """get_input_indexes() and is_computable() in bulk form (for the
        vectorised graph builder, compile/graph/bulk.py).

        Return offsets ``(dn, dt, dx)`` only if, for every output Index whose
        t is not kNoTime, get_input_indexes() lists that Index plus each
        offset (in this order) and is_computable() is true exactly when all
        of them are available, using all of them.  The builder trusts it only
        when the same class defines all three methods.
        """
        return None

    def get_input_index_range(self) -> tuple[int, int, int, int, int] | None:
        """get_input_indexes() and is_computable() in bulk form for
        components that read a window of their input (the statistics
        components), for the accelerated graph builders.

        Return ``(modulus, offset, step, count, multiple)`` only if, for an
        output Index (n, t, x) with ``t % multiple == 0``, get_input_indexes()
        lists (n, s, x) for ``s = t - t % modulus + offset + k * step``,
        ``k = 0 .. count - 1`` (in this order), and is_computable() is true
        exactly when at least one of them is available, using those that are
        (a ``t`` that is not a multiple of ``multiple`` makes
        get_input_indexes() raise).  Trusted only when the same class defines
        the three methods.
        """
        return None

    def precompute_indexes(self, misc_info: Any, input_indexes: list[tuple],
                           output_indexes: list[tuple], need_backprop: bool) -> Any:
        return None

    # -- math (implemented by the execution and training stages) -----------
    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        raise NotImplementedError(f"{self.type_name}.propagate")

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: "Component | None", in_deriv: np.ndarray | None) -> None:
        raise NotImplementedError(f"{self.type_name}.backprop")

    def store_stats(self, in_value: np.ndarray, out_value: np.ndarray, memo: Any) -> None:
        pass


class UpdatableComponent(Component):
    """Kaldi's UpdatableComponent: learning rate, factor, max-change, l2."""

    def __init__(self) -> None:
        self.learning_rate = 0.001
        self.learning_rate_factor = 1.0
        self.is_gradient = False
        self.max_change = 0.0
        self.l2_regularize = 0.0

    def init_learning_rates_from_config(self, cfl: ConfigLine) -> None:
        self.learning_rate = cfl.get_float("learning-rate", 0.001)
        self.learning_rate_factor = cfl.get_float("learning-rate-factor", 1.0)
        self.max_change = cfl.get_float("max-change", 0.0)
        self.l2_regularize = cfl.get_float("l2-regularize", 0.0)
        if (self.learning_rate < 0 or self.learning_rate_factor < 0
                or self.max_change < 0 or self.l2_regularize < 0):
            raise self.config_error(cfl, "negative learning-rate, learning-rate-factor, "
                                         "max-change or l2-regularize")

    def read_updatable_common(self, r: KaldiReader, read_next: bool = False) -> str:
        """Kaldi's ReadUpdatableCommon.

        Returns the next unconsumed token, or "" when the common part ended
        with ``<LearningRate>`` (the usual case).  With ``read_next`` the token
        after the learning rate is read and returned too, which the few
        components that parse their own header variant need.  Kaldi's own
        variants stop before ``<MaxChange>``/``<L2Regularize>``; accepting them
        everywhere lets us read whatever Kaldi's common writer emits.
        """
        token = r.read_token()
        if token == self.opening_tag():
            token = r.read_token()
        self.learning_rate_factor = 1.0
        self.is_gradient = False
        self.max_change = 0.0
        self.l2_regularize = 0.0
        if token == "<LearningRateFactor>":
            self.learning_rate_factor = r.read_float()
            token = r.read_token()
        if token == "<IsGradient>":
            self.is_gradient = r.read_bool()
            token = r.read_token()
        if token == "<MaxChange>":
            self.max_change = r.read_float()
            token = r.read_token()
        if token == "<L2Regularize>":
            self.l2_regularize = r.read_float()
            token = r.read_token()
        if token == "<LearningRate>":
            self.learning_rate = r.read_float()
            return r.read_token() if read_next else ""
        self.learning_rate = 0.001
        return token

    def write_updatable_common(self, w: KaldiWriter) -> None:
        w.write_token(self.opening_tag())
        if self.learning_rate_factor != 1.0:
            w.write_token("<LearningRateFactor>")
            w.write_float(self.learning_rate_factor)
        if self.is_gradient:
            w.write_token("<IsGradient>")
            w.write_bool(self.is_gradient)
        if self.max_change > 0.0:
            w.write_token("<MaxChange>")
            w.write_float(self.max_change)
        if self.l2_regularize > 0.0:
            w.write_token("<L2Regularize>")
            w.write_float(self.l2_regularize)
        w.write_token("<LearningRate>")
        w.write_float(self.learning_rate)

    def info(self) -> str:
        s = (f"{self.type_name}, input-dim={self.input_dim()}, output-dim={self.output_dim()}"
             f", learning-rate={fmt_g(self.learning_rate)}")
        if self.is_gradient:
            s += ", is-gradient=true"
        if self.l2_regularize != 0.0:
            s += f", l2-regularize={fmt_g(self.l2_regularize)}"
        if self.learning_rate_factor != 1.0:
            s += f", learning-rate-factor={fmt_g(self.learning_rate_factor)}"
        if self.max_change > 0.0:
            s += f", max-change={fmt_g(self.max_change)}"
        return s

    # Kaldi: SetUnderlyingLearningRate multiplies by the factor.
    def set_underlying_learning_rate(self, lrate: float) -> None:
        self.learning_rate = float(np.float32(lrate * self.learning_rate_factor))

    def set_actual_learning_rate(self, lrate: float) -> None:
        self.learning_rate = float(np.float32(lrate))

    def set_as_gradient(self) -> None:
        self.learning_rate = 1.0
        self.is_gradient = True


def check_read_end(r: KaldiReader, comp: Component) -> None:
    """Expect the closing tag of ``comp``."""
    r.expect_token(comp.closing_tag())


def bad_format(r: KaldiReader, comp: Component, message: str) -> FormatError:
    return r.error(f"{comp.type_name}: {message}")


# ---------------------------------------------------------------------------
# Random numbers for parameter initialisation (nnet3-init --srand).
# One generator for the process, seeded once by the binary, so that
# initialisation is reproducible for a given --srand.

# Made on first use: importing numpy.random costs 2.5 MB of resident memory
# and ~10 ms, which binaries that only read networks (nnet3-compute) skip.
_RNG: "np.random.Generator | None" = None


_SEED = 0


def set_random_seed(seed: int) -> None:
    global _RNG, _SEED
    # Kaldi calls srand(seed) with an int: a negative seed is taken modulo 2^32.
    # The generator is made at its first use: importing numpy.random costs
    # ~8 ms of a binary's start-up, and most runs (nnet3-train on a model
    # with no dropout) never draw from it.
    _SEED, _RNG = seed & 0xFFFFFFFF, None


def rng() -> "np.random.Generator":
    """The components' generator, ``np.random.default_rng(seed)``'s stream.
    (A LightGenerator: the small integer draws of the nonlinearities' stats
    sampling are made without importing numpy.random; anything else goes
    on in NumPy's generator from the same state.)"""
    global _RNG
    if _RNG is None:
        from .light_rng import LightGenerator

        _RNG = LightGenerator(_SEED)
    return _RNG


def _physical_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 1 << 62


def randn(*shape: int) -> np.ndarray:
    """Standard-normal float32 array (Kaldi's SetRandn).

    A size that could never fit (the float64 draw is bigger than the
    machine's memory, or than any array can be) is a MemoryError naming
    the shape before anything is allocated: otherwise the allocation may
    succeed lazily and the process be killed while filling it.
    """
    size = math.prod(shape)
    if size * 8 > _physical_memory_bytes():
        raise MemoryError(f"{size} random parameters (shape {shape}) need "
                          f"{size * 12 / 2 ** 30:.1f} GiB, more than this machine's memory")
    return rng().standard_normal(shape).astype(np.float32)


def reshape_rows(mat: np.ndarray, cols: int) -> np.ndarray:
    """A view of ``mat`` with rows of ``cols`` values (Kaldi's reshaped
    CuSubMatrix of a contiguous matrix).  Raises ValueError where that would
    need a copy, so that writes through the view are never lost."""
    view = mat.view()
    try:
        view.shape = (-1, cols)
    except AttributeError:
        raise ValueError(f"cannot view a {mat.shape} matrix with strides {mat.strides} as "
                         f"rows of {cols} (not contiguous)") from None
    return view


# ---------------------------------------------------------------------------
# Helpers shared by the component families: reading options and fields


def split_ints(cfl: ConfigLine, key: str, seps: str) -> list[int] | None:
    """Kaldi's SplitStringToIntegers(value, seps, omit_empty=true)."""
    value = cfl.get_str(key)
    if value is None:
        return None
    parts = [value]
    for sep in seps:
        parts = [q for p in parts for q in p.split(sep)]
    out = []
    for p in parts:
        p = p.strip()
        if not p:
            continue
        parsed = parse_int32(p)
        if parsed is None:
            raise cfl.error(f"option {key}={value}: expected integers separated by "
                            f"'{seps}' ({p}: {int32_error_detail(p)})")
        out.append(parsed)
    return out


def expect_or_error(cond: bool, comp: Component, cfl: ConfigLine, what: str = "") -> None:
    """Kaldi's InitFromConfig check: a ConfigError naming the type unless ``cond``."""
    if not cond:
        msg = "Invalid initializer for layer of type " + comp.type_name
        raise comp.config_error(cfl, msg + (f": {what}" if what else ""))


def read_vector_file(cfl: ConfigLine, comp: Component, key: str) -> np.ndarray:
    """A Kaldi vector from the rxfilename given as option ``key``."""
    filename = cfl.get_str(key)
    try:
        r = open_kaldi_object(filename)
        return r.read_vector()
    except FormatError as e:
        raise comp.config_error(cfl, f"could not read vector from {key}={filename}: {e}") from None


def read_common_then(comp: UpdatableComponent, r: KaldiReader, token: str) -> None:
    """ReadUpdatableCommon followed by ExpectToken(token)."""
    rest = comp.read_updatable_common(r)
    if rest == "":
        r.expect_token(token)
    elif rest != token:
        raise r.error(f"{comp.type_name}: expected <LearningRate> or {token}, got {rest[:40]}")


class InOutDimComponent(Component):
    """Components written as ``<InputDim> i <OutputDim> o``."""

    def __init__(self) -> None:
        self._input_dim = 0
        self._output_dim = 0

    def input_dim(self) -> int:
        return self._input_dim

    def output_dim(self) -> int:
        return self._output_dim

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<InputDim>")
        self._input_dim = r.read_int32()
        r.expect_token("<OutputDim>")
        self._output_dim = r.read_int32()
        r.expect_token(self.closing_tag())

    def write(self, w: KaldiWriter) -> None:
        w.write_token(self.opening_tag())
        w.write_token("<InputDim>")
        w.write_int32(self._input_dim)
        w.write_token("<OutputDim>")
        w.write_int32(self._output_dim)
        w.write_token(self.closing_tag())
