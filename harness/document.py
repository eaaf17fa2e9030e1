"""The report as a list of blocks (headings, paragraphs, bullets, tables, figures) and its
renderings, Markdown and PDF (fpdf2): what the report says is built in ``harness/report/``, how
it looks is decided here, once for all outputs. Each block says where it goes (``Place``): the
report keeps the analysis, the appendix (``tables.md``) every table under its headings, and a
block placed ``"appendix"`` (each point's values) goes to the appendix only."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import pandas as pd

Place = Literal["report", "appendix", "both"]


@dataclass
class Block:
    kind: Literal["heading", "text", "bullets", "table", "image"]
    text: str = ""
    level: int = 2
    items: list[str] = field(default_factory=list)
    table: pd.DataFrame | None = None
    place: Place = "report"


def heading(text: str, level: int = 2, place: Place = "both") -> Block:
    return Block("heading", text=text, level=level, place=place)


def para(text: str, place: Place = "report") -> Block:
    return Block("text", text=text, place=place)


def bullets(items: list[str]) -> Block:
    return Block("bullets", items=[i for i in items if i])


def table(frame: pd.DataFrame, place: Place = "both") -> Block:
    return Block("table", table=frame, place=place)


def report_blocks(blocks: list[Block]) -> list[Block]:
    """The report: every block not placed in the appendix only."""
    return [b for b in blocks if b.place != "appendix"]


def appendix_blocks(blocks: list[Block]) -> list[Block]:
    """The appendix (``tables.md``): the blocks placed there (every table under its headings, and
    the sentences placed beside them), without a heading that has nothing under it."""
    kept = [b for b in blocks if b.place != "report"]
    return [b for i, b in enumerate(kept) if b.kind != "heading" or _introduces_content(kept, i)]


def _introduces_content(blocks: list[Block], i: int) -> bool:
    """Whether heading ``i`` has a table or sentence under it before the next heading of its
    level or above (a heading over nothing is left out of the appendix)."""
    for b in blocks[i + 1:]:
        if b.kind != "heading":
            return True
        if b.level <= blocks[i].level:
            return False
    return False


def image(results_dir: Path, name: str, caption: str) -> Block:
    """A figure from ``figures/``; a missing file becomes a sentence, never a broken link."""
    if not (results_dir / "figures" / name).is_file():
        return para(f"(Figure {caption}: `figures/{name}` is missing; run `plot_results.py`.)")
    return Block("image", text=caption, items=[f"figures/{name}"])


def _cell(value: Any) -> str:
    """A table cell as text: integral floats without '.0', missing values as 'n/a'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else str(round(value, 2))
    return str(value)


def render_markdown(blocks: list[Block]) -> str:
    out = []
    for b in blocks:
        if b.kind == "heading":
            out.append("#" * b.level + " " + b.text)
        elif b.kind == "text":
            out.append(b.text)
        elif b.kind == "bullets":
            out.append("\n".join(f"- {item}" for item in b.items))
        elif b.kind == "table" and b.table is not None:
            out.append(b.table.to_markdown(index=False))
        elif b.kind == "image":
            out.append(f"![{b.text}]({b.items[0]})")
    return "\n\n".join(out) + "\n"


def render_pdf(blocks: list[Block], results_dir: Path, out: Path, created: datetime | None = None) -> None:
    """The same blocks on A4 (DejaVu Sans from matplotlib's data, so any host renders Unicode);
    ``created`` fixes the PDF's date, so unchanged results give the same bytes."""
    import matplotlib
    from fpdf import FPDF
    from fpdf.fonts import FontFace
    from PIL import Image

    pdf = FPDF(format="A4")
    pdf.set_creation_date(created or datetime.fromisoformat("1970-01-01T00:00:00+00:00"))
    pdf.set_title(blocks[0].text if blocks else "Lab 3 report")
    pdf.set_margins(12, 12, 12)
    pdf.set_auto_page_break(True, margin=12)
    ttf = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    pdf.add_font("DejaVu", "", str(ttf / "DejaVuSans.ttf"))
    pdf.add_font("DejaVu", "B", str(ttf / "DejaVuSans-Bold.ttf"))
    pdf.add_page()
    plain = lambda text: text.replace("`", "")  # noqa: E731
    for b in blocks:
        if b.kind == "heading":
            if pdf.get_y() + 40 > pdf.page_break_trigger:  # no heading alone at a page's foot
                pdf.add_page()
            pdf.set_font("DejaVu", "B", {1: 15, 2: 13}.get(b.level, 11))
            pdf.multi_cell(0, 7, plain(b.text), new_x="LMARGIN", new_y="NEXT")
        elif b.kind in ("text", "bullets"):
            pdf.set_font("DejaVu", "", 9)
            for item in [b.text] if b.kind == "text" else ["\u2022 " + i for i in b.items]:
                pdf.multi_cell(0, 4.6, plain(item), align="L", new_x="LMARGIN", new_y="NEXT")
                pdf.ln(0.8)
        elif b.kind == "table" and b.table is not None:
            frame = b.table
            pdf.set_font("DejaVu", "", 6.5 if len(frame.columns) > 7 else 7.5)
            with pdf.table(col_widths=(2.0,) + (1.0,) * (len(frame.columns) - 1), text_align="LEFT",
                           line_height=3.4, padding=0.8, headings_style=FontFace(emphasis="BOLD")) as grid:
                grid.row([str(c) for c in frame.columns])
                for values in frame.itertuples(index=False):
                    grid.row([_cell(v) for v in values])
        elif b.kind == "image":
            with Image.open(results_dir / b.items[0]) as img:
                height = pdf.epw * img.size[1] / img.size[0]
            if pdf.get_y() + height > pdf.page_break_trigger:
                pdf.add_page()
            pdf.image(str(results_dir / b.items[0]), w=pdf.epw)
            pdf.set_font("DejaVu", "", 8)
            pdf.multi_cell(0, 4, plain(b.text), align="C", new_x="LMARGIN", new_y="NEXT")
        pdf.ln(2)
    pdf.output(str(out))
