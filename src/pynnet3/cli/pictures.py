"""Pictures drawn with matplotlib for the binaries that have a picture option.

matplotlib is imported here only, inside the functions, with the Agg backend
(no display needed), so that binaries that draw nothing never pay its import.
The data come from the library (``nnet.graph_layout``, ``compile.memory_profile``,
``train.progress_logs``); this module only draws them.  The format follows the
file name's extension (.png, .svg, .pdf); files are written atomically.
"""
from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..optimize.memory_profile import MemoryProfile
    from ..nnet.graph_layout import GraphLayout
    from ..train.progress_logs import TrainingProgress

__all__ = ["draw_memory_profile", "draw_network_graph", "draw_training_progress",
           "draw_posteriors"]

_FORMATS = ("png", "svg", "pdf")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str, dpi: int = 100) -> None:
    from ..errors import FormatError, UsageError
    from ..io.atomic import atomic_write

    ext = os.path.splitext(path)[1].lower().lstrip(".") or "png"
    if ext not in _FORMATS:
        raise UsageError(f"cannot write a picture to {path}: the name must end in "
                         f"{', '.join('.' + f for f in _FORMATS)}")
    buf = io.BytesIO()
    # Fixed metadata: the same data give the same file.
    meta = {"Software": None} if ext == "png" else ({"Date": None} if ext == "svg" else None)
    fig.savefig(buf, format=ext, dpi=dpi, metadata=meta)
    _pyplot().close(fig)
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise FormatError("could not open for writing: no such directory", where=path)
    try:
        atomic_write(path, buf.getvalue())
    except OSError as e:   # a directory of that name, a full disk...
        raise FormatError(f"could not write: {e.strerror or e}", where=path) from None


_NODE_COLORS = {"input": "#d4edda", "output": "#f8d7da", "component": "#dbe9f6",
                "dim-range": "#fff3cd"}


def draw_network_graph(layout: "GraphLayout", path: str, title: str = "") -> None:
    """Boxes (name, type, dim) by level, edges with their Descriptor labels."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    plt = _pyplot()
    slot_w, row_h = 2.6, 0.72     # inches per node slot / per level
    rows = max(layout.rows_per_column, 1)
    fig_w = max(4.0, slot_w * layout.width + 0.6)
    fig_h = max(2.5, row_h * rows + 0.9)
    fig = plt.figure(figsize=(fig_w, fig_h))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0 - 0.5 / fig_h))
    ax.set_xlim(-0.55, layout.width - 0.45)
    ax.set_ylim(rows - 0.45, -0.6)
    ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=11, y=1.0 - 0.15 / fig_h, va="top")
    box_w, box_h = 0.86, 0.5
    pos = {n.node: n for n in layout.nodes}
    for e in layout.edges:
        a, b = pos[e.src], pos[e.dst]
        same_col = (a.level // rows) == (b.level // rows)
        label_at = 0.5
        if same_col and not e.recurrent and b.y - a.y > 1.01:
            # A skip connection: a bracket beside the boxes it passes.
            side = 1.0 if b.x >= a.x else -1.0
            start = (a.x + side * box_w / 2, a.y)
            end = (b.x + side * box_w / 2, b.y)
            conn = f"bar,armA={12 * side},armB={12 * side},fraction=0.0"
            style = dict(color="#4a6fa5", lw=1.0)
            # On the bar (12 points = 12/72 inch beside the boxes).
            lxy = (start[0] + side * (12 / 72) / slot_w, (start[1] + end[1]) / 2)
            ha = "center"
        elif same_col and not e.recurrent and b.y > a.y:
            start, end = (a.x, a.y + box_h / 2), (b.x, b.y - box_h / 2)
            conn = "arc3,rad=0.0"
            style = dict(color="#4a6fa5", lw=1.0)
            lxy = (a.x + (b.x - a.x) * 0.45, a.y + box_h / 2 + 0.2)
            ha = "center"
        else:
            # Into the next column (or back, for a recurrence): a dashed line,
            # labelled near its end so that the label is read with its target.
            start, end = (a.x + box_w / 2, a.y), (b.x - box_w / 2, b.y)
            if b.x < a.x:
                start, end = (a.x - box_w / 2, a.y), (b.x + box_w / 2, b.y)
            conn = f"arc3,rad={0.15 if e.recurrent else 0.0}"
            style = dict(color="#c0392b" if e.recurrent else "#888888", lw=0.9, ls="--")
            label_at = 0.85
            lxy = (start[0] + (end[0] - start[0]) * label_at,
                   start[1] + (end[1] - start[1]) * label_at)
            ha = "center"
        arrow = FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=9,
                                connectionstyle=conn, shrinkA=0, shrinkB=1,
                                zorder=1, **style)
        ax.add_patch(arrow)
        if e.label:
            ax.text(lxy[0], lxy[1], e.label, fontsize=6.5, ha=ha, va="center", zorder=3,
                    color="#1f3b63", bbox=dict(boxstyle="round,pad=0.15", fc="white",
                                               ec="none", alpha=0.85))
    for n in layout.nodes:
        box = FancyBboxPatch((n.x - box_w / 2, n.y - box_h / 2), box_w, box_h,
                             boxstyle="round,pad=0.0,rounding_size=0.08",
                             fc=_NODE_COLORS.get(n.kind, "white"), ec="#333333", lw=0.8,
                             zorder=2)
        ax.add_patch(box)
        kind = n.type_name if n.kind == "component" else n.kind
        ax.text(n.x, n.y - 0.1, n.name, fontsize=7.5, ha="center", va="center",
                weight="bold", zorder=3)
        ax.text(n.x, n.y + 0.14, f"{kind}  dim={n.dim}", fontsize=6.5, ha="center",
                va="center", color="#333333", zorder=3)
    _save(fig, path)


def draw_memory_profile(profile: "MemoryProfile", path: str, title: str = "") -> None:
    """Matrix memory alive after each command, peak marked, backward pass shaded."""
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.2))
    n = profile.num_commands
    scale, unit = _memory_unit(profile.peak)
    y = profile.alive / scale
    x = np.arange(n)
    ax.step(x, y, where="post", color="#1f77b4", lw=1.3, label="matrices held (as Kaldi's GetMaxMemoryUse counts)")
    ax.fill_between(x, y, step="post", color="#1f77b4", alpha=0.15)
    if profile.backward_start >= 0:
        ax.axvspan(profile.backward_start - 0.5, n - 0.5, color="#ff7f0e", alpha=0.10,
                   label=f"backward pass (from command c{profile.backward_start})")
        ax.axvline(profile.backward_start - 0.5, color="#ff7f0e", lw=0.8)
    if profile.peak_index >= 0:
        py = profile.peak / scale
        ax.plot([profile.peak_index], [py], "o", color="#d62728", zorder=3)
        ax.annotate(f"peak {py:.3g} {unit} at c{profile.peak_index}\n"
                    f"({profile.peak} bytes)", (profile.peak_index, py),
                    textcoords="offset points", xytext=(6, 4), va="bottom", fontsize=8,
                    color="#d62728")
    if profile.backward_start > 0:
        ax.text((profile.backward_start - 0.5) / 2, 0.0, "forward", ha="center", va="bottom",
                fontsize=8, color="#555555")
        ax.text((profile.backward_start + n) / 2, 0.0, "backward", ha="center", va="bottom",
                fontsize=8, color="#a0522d")
    ax.set_xlim(-0.5, max(n - 0.5, 0.5))
    ax.set_ylim(0, (max(y.max(), 1e-9) if n else 1.0) * 1.2)
    ax.set_xlabel("command index")
    ax.set_ylabel(f"matrix memory held ({unit})")
    ax.set_title(title or "Matrix memory over the computation", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def _memory_unit(num_bytes: float) -> tuple[float, str]:
    for scale, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if num_bytes >= scale:
            return float(scale), unit
    return 1.0, "bytes"


def draw_training_progress(progress: "TrainingProgress", path: str, title: str = "") -> None:
    """Objective and accuracy per iteration, train and valid, side by side."""
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    last = max([*progress.valid_objf.iters, *progress.train_objf.iters,
                *progress.valid_acc.iters, *progress.train_acc.iters,
                *(i + 1 for i in progress.train_jobs_objf.iters), 0])
    named = sorted({*progress.valid_objf.named, *progress.train_objf.named,
                    *progress.valid_acc.named, *progress.train_acc.named})
    named_x = {name: last + 1 + k for k, name in enumerate(named)}

    def plot(ax: Any, series: Any, label: str, color: str, style: str = "-o",
             shift: float = 0.0) -> None:
        if series.iters:
            ax.plot([i + shift for i in series.iters], series.values, style, color=color,
                    ms=3.5, lw=1.3, label=label)
        for name, value in series.named.items():
            ax.plot([named_x[name]], [value], "D", color=color, ms=6)

    plot(ax1, progress.train_objf, "train (compute_prob)", "#1f77b4")
    plot(ax1, progress.valid_objf, "valid (compute_prob)", "#d62728")
    plot(ax1, progress.train_jobs_objf, "nnet3-train jobs (during the iteration)",
         "#7f7f7f", style="--", shift=0.5)
    plot(ax2, progress.train_acc, "train", "#1f77b4")
    plot(ax2, progress.valid_acc, "valid", "#d62728")
    for ax, ylabel in ((ax1, "log-likelihood per frame"), (ax2, "accuracy per frame")):
        ax.set_xlabel("iteration (model)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if named:
            ticks = [t for t in ax.get_xticks() if 0 <= t <= last]
            ax.set_xticks([*ticks, *named_x.values()])
            ax.set_xticklabels([f"{t:g}" for t in ticks] + list(named_x))
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="lower right")
    ax1.set_title("Objective", fontsize=10)
    ax2.set_title("Accuracy", fontsize=10)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    _save(fig, path)


def draw_posteriors(post: Any, path: str, title: str = "", top: int = 40,
                    frame_shift_ms: float = 10.0) -> None:
    """A heat map of the ``top`` pdfs (most probable on average) over frames.

    ``post`` is a [frames, pdfs] matrix of posteriors or log-posteriors (taken
    as log if any value is negative); ``frame_shift_ms`` is the time per row.
    """
    import numpy as np

    plt = _pyplot()
    post = np.asarray(post, dtype=np.float64)
    prob = np.exp(post) if (post < 0).any() else post
    k = min(top, prob.shape[1])
    best = np.argsort(-prob.mean(axis=0), kind="stable")[:k]
    best = np.sort(best)
    fig, ax = plt.subplots(figsize=(max(6.0, min(16.0, prob.shape[0] * 0.06 + 2)), 5.0))
    extent = (0, prob.shape[0] * frame_shift_ms / 1000.0, k - 0.5, -0.5)
    shown = prob[:, best].T
    # The colour scale ends at the largest value shown: an unsure model (or
    # synthetic input) still shows which pdfs win when.
    im = ax.imshow(shown, aspect="auto", interpolation="nearest", cmap="viridis",
                   extent=extent, vmin=0.0, vmax=max(float(shown.max()), 1e-12))
    ax.set_yticks(range(k))
    ax.set_yticklabels([str(p) for p in best], fontsize=max(4, 9 - k // 10))
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"pdf (the {k} most probable on average)")
    ax.set_title(title or "Output posteriors", fontsize=10)
    fig.colorbar(im, ax=ax, label="posterior")
    fig.tight_layout()
    _save(fig, path)
