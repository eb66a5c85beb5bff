"""The one figure writer: every plot goes through `catsim.files.replacing` (a temporary file next
to the target, then a rename), so a crash leaves the old figure or the new one, never half of one."""

from __future__ import annotations

from pathlib import Path


def save_figure(fig, path: str | Path, *, close: bool = True, **savefig_kwargs) -> Path:
    """Write `fig` to `path` atomically, in the format its suffix names (".png", ".pdf"; PNG when
    it has none), then close it (`close=False`: keep it open, to save it again in another format).
    `savefig_kwargs` go to `Figure.savefig` (dpi, metadata, ...)."""
    import matplotlib.pyplot as plt

    from catsim.files import replacing

    path = Path(path)
    fmt = path.suffix.lstrip(".") or "png"
    try:
        with replacing(path, suffix=f".{fmt}") as tmp:
            fig.savefig(tmp, format=fmt, **savefig_kwargs)
    finally:
        if close:
            plt.close(fig)
    return path
