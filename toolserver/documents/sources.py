"""Where pages come from: a PDF (rendered with pypdfium2) or a folder of `{filename}_{page}.{ext}` images.

A source is opened and checked before anything is written, so a corrupt or encrypted file is refused
with a clear message and leaves the library as it was.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from PIL import Image

from toolserver.models import FILENAME_PATTERN

# ARM-Thinker's page-image extensions, in its lookup order (InternLM/ARM-Thinker @ 96b1baf,
# `verl/tools/doc_page_tools.py`).
PAGE_IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".webp")
_PAGE_FILE = re.compile(r"^(?P<name>.+)_(?P<page>\d+)(?P<ext>\.(?:jpg|jpeg|png|webp))$", re.IGNORECASE)
# Document ids become file names ({filename}_{page}.jpg): keep them to a safe, portable alphabet.
_FILENAME = re.compile(FILENAME_PATTERN)
# PDFium is not thread-safe; pypdfium2 documents one lock around all calls.
PDFIUM_LOCK = threading.Lock()


class DocumentError(Exception):
    """A document that cannot be ingested or found, with a message for the caller."""

    def __init__(self, message: str, code: str = "invalid_document"):
        super().__init__(message)
        self.message = message
        self.code = code


def check_filename(filename: str) -> str:
    if not isinstance(filename, str) or not _FILENAME.match(filename):
        raise DocumentError(
            f"document id {filename!r} is not valid: use 1 to 128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit", "invalid_filename")
    return filename


def filename_from_path(path: Path) -> str:
    """The default document id: the file's stem with anything outside the safe alphabet replaced by '_'."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", path.stem).lstrip("._-") or "document"
    return check_filename(stem[:128])


@dataclass
class Page:
    number: int  # 1-based
    image: Image.Image
    text: str


class PdfSource:
    kind: Final = "pdf"

    def __init__(self, path: Path, long_side: int, name: str | None = None):
        import pypdfium2 as pdfium

        name = name or path.name  # what errors call it: the document's name, not an upload's temporary file
        self.path = path
        self.long_side = long_side
        data = path.read_bytes()
        self.sha256 = hashlib.sha256(data).hexdigest()
        with PDFIUM_LOCK:
            try:
                self._pdf = pdfium.PdfDocument(data)
            except pdfium.PdfiumError as exc:
                if "password" in str(exc).lower():
                    raise DocumentError(f"{name} is encrypted (password-protected); decrypt it first",
                                        "encrypted_pdf") from None
                raise DocumentError(f"{name} is not a readable PDF: {exc}", "invalid_pdf") from None
            self.pages = len(self._pdf)
        if self.pages == 0:
            raise DocumentError(f"{name} has no pages", "invalid_pdf")

    def read(self, start: int, stop: int) -> Iterator[Page]:
        """Pages start..stop-1 (1-based), rendered so their long side is `long_side` pixels."""
        for number in range(start, stop):
            with PDFIUM_LOCK:
                page = self._pdf[number - 1]
                width, height = page.get_size()
                scale = self.long_side / max(width, height, 1.0)
                image = page.render(scale=scale).to_pil().convert("RGB")
                text = page.get_textpage().get_text_bounded()
            yield Page(number, image, _clean_text(text))

    def close(self) -> None:
        with PDFIUM_LOCK:
            self._pdf.close()


class ImageFolderSource:
    """One document's pages from a folder laid out as ARM-Thinker expects: `{filename}_{page}.{ext}`."""

    kind: Final = "images"

    def __init__(self, folder: Path, filename: str):
        self.path = folder
        found = scan_image_folder(folder).get(filename)
        if not found:
            raise DocumentError(f"no page images named {filename}_<page>.<jpg|jpeg|png|webp> in {folder.name}",
                                "invalid_document")
        numbers = sorted(found)
        if numbers != list(range(1, len(numbers) + 1)):
            missing = sorted(set(range(1, numbers[-1] + 1)) - set(numbers))
            raise DocumentError(f"pages of {filename} must be numbered 1..N without gaps; missing: {missing[:10]}",
                                "invalid_document")
        self.files = [found[n] for n in numbers]
        self.pages = len(self.files)
        digest = hashlib.sha256()
        for file in self.files:
            digest.update(file.name.encode() + b"\0" + file.read_bytes())
        self.sha256 = digest.hexdigest()

    def read(self, start: int, stop: int) -> Iterator[Page]:
        for number in range(start, stop):
            file = self.files[number - 1]
            try:
                with Image.open(file) as img:
                    image = img.convert("RGB")
            except (OSError, ValueError) as exc:
                raise DocumentError(f"page image {file.name} cannot be read: {exc}", "invalid_image") from None
            yield Page(number, image, "")

    def close(self) -> None:
        pass


def scan_image_folder(folder: Path) -> dict[str, dict[int, Path]]:
    """Every `{filename}_{page}.{ext}` file in a folder, grouped by document (first extension in ARM's order wins)."""
    docs: dict[str, dict[int, Path]] = {}
    files = sorted(folder.iterdir(), key=lambda p: (PAGE_IMAGE_EXTS.index(p.suffix.lower())
                                                   if p.suffix.lower() in PAGE_IMAGE_EXTS else 99, p.name))
    for file in files:
        match = _PAGE_FILE.match(file.name)
        if match and file.is_file() and int(match["page"]) >= 1:
            docs.setdefault(match["name"], {}).setdefault(int(match["page"]), file)
    return docs


def open_source(path: Path, filename: str, long_side: int) -> PdfSource | ImageFolderSource:
    if path.is_dir():
        return ImageFolderSource(path, filename)
    if not path.is_file():
        raise DocumentError(f"{path} does not exist", "not_found")
    return PdfSource(path, long_side, filename)


def _clean_text(text: str) -> str:
    # PDFium returns CRLF line ends and soft hyphens at line breaks.
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\u00ad", "").replace("\ufffe", "")
