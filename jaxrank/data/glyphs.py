"""Characters across typefaces: a many-class retrieval data set generated offline in seconds.

Matplotlib ships real typefaces (DejaVu Sans, Sans Mono and Serif and STIX General, each in four
styles, and Computer Modern). One class is one Unicode character drawn in at least
`min_typefaces` of them; each image is that character in one typeface, drawn with Pillow and
then augmented (scale, rotation, shear, translation, stroke weight, noise) with a seeded random
generator. Super-classes are the character's script for letters (Latin, Greek, Cyrillic, ...) and
its Unicode block otherwise (arrows, box drawing, mathematical operators, ...). Train and test
hold disjoint classes, half of each super-class's characters each, as CUB and SOP split classes.

The regime is the papers' (CUB, Cars196, SOP): about a thousand training classes, each seen a
dozen times, super-classes for hard batches, and retrieval on classes never seen in training.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import unicodedata
from collections.abc import Sequence

import numpy as np

from jaxrank._src import checks
from jaxrank.data.datasets import LabeledImages

# Bumped whenever the images for the same parameters change: old cache files are then ignored.
_FORMAT_VERSION = 1

# Typefaces with a Unicode cmap: DejaVu and STIX General, four styles each.
_UNICODE_FACES = (
  "DejaVuSans.ttf",
  "DejaVuSans-Bold.ttf",
  "DejaVuSans-Oblique.ttf",
  "DejaVuSans-BoldOblique.ttf",
  "DejaVuSansMono.ttf",
  "DejaVuSansMono-Bold.ttf",
  "DejaVuSansMono-Oblique.ttf",
  "DejaVuSansMono-BoldOblique.ttf",
  "DejaVuSerif.ttf",
  "DejaVuSerif-Bold.ttf",
  "DejaVuSerif-Italic.ttf",
  "DejaVuSerif-BoldItalic.ttf",
  "STIXGeneral.ttf",
  "STIXGeneralBol.ttf",
  "STIXGeneralItalic.ttf",
  "STIXGeneralBolIta.ttf",
)
# Computer Modern (BaKoMa) maps TeX's encoding, not Unicode: only its ASCII letters and digits
# are the characters their code points name.
_TEX_FACES = ("cmr10.ttf", "cmss10.ttf", "cmtt10.ttf", "cmti10.ttf", "cmb10.ttf")
_ASCII_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")

# Scripts whose letters form one super-class whichever block they sit in (Latin-1, Latin
# Extended-A/B, Latin Extended Additional, ...): the first word of the character's Unicode name.
_SCRIPTS = frozenset(
  {
    "LATIN",
    "GREEK",
    "CYRILLIC",
    "ARMENIAN",
    "GEORGIAN",
    "HEBREW",
    "ARABIC",
    "COPTIC",
    "LAO",
    "THAI",
    "NKO",
    "OGHAM",
    "TIFINAGH",
    "CHEROKEE",
    "RUNIC",
    "GOTHIC",
    "OLD",
  }
)

# The Unicode blocks of everything else (start, end inclusive, name) in the ranges these typefaces
# cover; characters outside them form the super-class "Other".
_BLOCKS = (
  (0x0000, 0x007F, "Basic Latin"),
  (0x0080, 0x00FF, "Latin-1 Supplement"),
  (0x0100, 0x024F, "Latin Extended"),
  (0x0250, 0x02AF, "IPA Extensions"),
  (0x02B0, 0x02FF, "Spacing Modifier Letters"),
  (0x0370, 0x03FF, "Greek and Coptic"),
  (0x0400, 0x052F, "Cyrillic"),
  (0x1D00, 0x1DBF, "Phonetic Extensions"),
  (0x1E00, 0x1EFF, "Latin Extended Additional"),
  (0x1F00, 0x1FFF, "Greek Extended"),
  (0x2000, 0x206F, "General Punctuation"),
  (0x2070, 0x209F, "Superscripts and Subscripts"),
  (0x20A0, 0x20CF, "Currency Symbols"),
  (0x2100, 0x214F, "Letterlike Symbols"),
  (0x2150, 0x218F, "Number Forms"),
  (0x2190, 0x21FF, "Arrows"),
  (0x2200, 0x22FF, "Mathematical Operators"),
  (0x2300, 0x23FF, "Miscellaneous Technical"),
  (0x2400, 0x245F, "Control Pictures and OCR"),
  (0x2460, 0x24FF, "Enclosed Alphanumerics"),
  (0x2500, 0x257F, "Box Drawing"),
  (0x2580, 0x259F, "Block Elements"),
  (0x25A0, 0x25FF, "Geometric Shapes"),
  (0x2600, 0x26FF, "Miscellaneous Symbols"),
  (0x2700, 0x27BF, "Dingbats"),
  (0x27C0, 0x27FF, "Miscellaneous Mathematical Symbols-A and Arrows-A"),
  (0x2800, 0x28FF, "Braille Patterns"),
  (0x2900, 0x297F, "Supplemental Arrows-B"),
  (0x2980, 0x29FF, "Miscellaneous Mathematical Symbols-B"),
  (0x2A00, 0x2AFF, "Supplemental Mathematical Operators"),
  (0x2B00, 0x2BFF, "Miscellaneous Symbols and Arrows"),
  (0x2C60, 0x2C7F, "Latin Extended-C"),
  (0xA720, 0xA7FF, "Latin Extended-D"),
  (0xFB00, 0xFB4F, "Alphabetic Presentation Forms"),
)
# A super-class with fewer characters joins "Other": each split needs some of every super-class.
_MIN_SUPER_CLASS = 4
# The split is a property of the data set, not of `seed`: a fixed seed orders each super-class.
_SPLIT_SEED = 20261123
# Glyphs are drawn once on a canvas this many times the image side, then warped down.
_OVERSAMPLE = 2
# A drawn glyph with fewer ink pixels (> 1/2) than this on the canvas counts as empty.
_MIN_INK = 4


def _font_dir() -> str:
  import matplotlib  # pylint: disable=g-import-not-at-top

  return os.path.join(matplotlib.get_data_path(), "fonts", "ttf")


def _default_cache_dir() -> str:
  root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(root, "jaxrank", "glyphs")


def _faces(font_dir: str) -> list[tuple[str, frozenset[int]]]:
  """`(path, code points it draws as themselves)` of each typeface, in a fixed order."""
  from fontTools import ttLib  # pylint: disable=g-import-not-at-top

  names = _UNICODE_FACES + _TEX_FACES
  missing = [f for f in names if not os.path.isfile(os.path.join(font_dir, f))]
  if missing:
    raise FileNotFoundError(
      f"load_glyphs: the typefaces {missing} are not in {font_dir!r}. They ship with matplotlib "
      "(mpl-data/fonts/ttf): install the `train` extra (pip install 'jaxrank[train]') or pass "
      "font_dir= a folder holding them."
    )
  faces = []
  for name in names:
    path = os.path.join(font_dir, name)
    with ttLib.TTFont(path, lazy=True) as font:
      cmap = font.getBestCmap() or {}
    points = frozenset(cmap)
    if name in _TEX_FACES:
      points = frozenset(ord(c) for c in _ASCII_ALNUM) & points
    faces.append((path, points))
  return faces


def _drawable(ch: str) -> bool:
  """Not whitespace, control, format, private-use, unassigned, or a combining mark."""
  return unicodedata.category(ch)[0] not in "ZCM"


def super_class_name(ch: str) -> str:
  """The script of a letter (`"LATIN"`, `"GREEK"`, ...), else the Unicode block of `ch`."""
  name = unicodedata.name(ch, "")
  first = name.split(" ", 1)[0]
  if unicodedata.category(ch).startswith("L") and first in _SCRIPTS:
    return first
  point = ord(ch)
  for start, end, block in _BLOCKS:
    if start <= point <= end:
      return block
  return "Other"


def _render_faces(
  faces: Sequence[tuple[str, frozenset[int]]], candidates: Sequence[int], side: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Draws each candidate in each typeface that claims it, on a `side x side` canvas.

  A drawing is kept when the face's cmap claims the character and the drawing is neither empty
  nor the face's missing-glyph box.

  Returns:
    `glyphs [K, side, side]` uint8 ink of the kept drawings, face-major, and their `faces [K]` and
    `chars [K]` (indices into `faces` and `candidates`).
  """
  from PIL import Image  # pylint: disable=g-import-not-at-top
  from PIL import ImageDraw  # pylint: disable=g-import-not-at-top
  from PIL import ImageFont  # pylint: disable=g-import-not-at-top

  glyphs, face_ids, char_ids = [], [], []
  size = round(side * 0.6)
  for f, (path, points) in enumerate(faces):
    font = ImageFont.truetype(path, size)

    def draw(ch: str, font=font) -> np.ndarray:
      canvas = Image.new("L", (side, side), 0)
      ImageDraw.Draw(canvas).text((side / 2, side / 2), ch, font=font, fill=255, anchor="mm")
      return np.asarray(canvas)

    notdef = draw(chr(0x10FFFD))  # Private use, in no typeface: drawn as the .notdef box.
    for c, point in enumerate(candidates):
      if point not in points:
        continue
      image = draw(chr(point))
      if np.count_nonzero(image > 127) < _MIN_INK or np.array_equal(image, notdef):
        continue
      glyphs.append(image)
      face_ids.append(f)
      char_ids.append(c)
  return np.stack(glyphs), np.asarray(face_ids, np.int32), np.asarray(char_ids, np.int64)


def _classes(
  faces: Sequence[tuple[str, frozenset[int]]], min_typefaces: int, side: int
) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray, np.ndarray]:
  """The characters drawn by >= min_typefaces faces, their super-classes and drawings.

  Returns `(points [C], super-class names [C], glyphs [K, side, side], faces [K], classes [K])`.
  """
  covered = np.zeros(0x110000, np.int32)
  for _, face_points in faces:
    covered[list(face_points)] += 1
  candidates = np.asarray(
    [p for p in np.flatnonzero(covered >= min_typefaces) if _drawable(chr(p))], np.int64
  )
  glyphs, face_ids, char_ids = _render_faces(faces, candidates.tolist(), side)
  keep = np.bincount(char_ids, minlength=len(candidates)) >= min_typefaces
  new_index = np.cumsum(keep) - 1
  drawn = keep[char_ids]
  points = candidates[keep]
  supers = [super_class_name(chr(p)) for p in points]
  counts: dict[str, int] = {}
  for s in supers:
    counts[s] = counts.get(s, 0) + 1
  supers = [s if counts[s] >= _MIN_SUPER_CLASS else "Other" for s in supers]
  return points, supers, glyphs[drawn], face_ids[drawn], new_index[char_ids[drawn]]


def _split_classes(points: np.ndarray | Sequence[int], supers: Sequence[str]) -> np.ndarray:
  """`[C]` bool, True for the training half: half of each super-class (the odd one to test)."""
  rng = np.random.default_rng(_SPLIT_SEED)
  train = np.zeros(len(points), bool)
  super_names = np.asarray(supers)
  for name in sorted(set(super_names.tolist())):
    members = np.flatnonzero(super_names == name)  # Code point order.
    members = members[rng.permutation(len(members))]
    train[members[: len(members) // 2]] = True
  return train


def _grey_morphology(x: np.ndarray, grow: bool) -> np.ndarray:
  """3 x 3 grey dilation (`grow`) or erosion of `[N, S, S]`, edges padded with background."""
  op = np.maximum if grow else np.minimum
  pad = np.pad(x, ((0, 0), (1, 1), (1, 1)))
  rows = op(op(pad[:, :-2], pad[:, 1:-1]), pad[:, 2:])
  return op(op(rows[:, :, :-2], rows[:, :, 1:-1]), rows[:, :, 2:])


def _augment(
  base: np.ndarray, image_size: int, strength: float, noise: float, rng: np.random.Generator
) -> np.ndarray:
  """Random stroke weight, affine warp and noise of `base [N, S, S]` (`S = 2 image_size`).

  Returns `[N, image_size, image_size]` uint8 (ink 255).
  """
  n, s = int(base.shape[0]), int(base.shape[1])
  a = strength
  weight = rng.uniform(-a, a, n).astype(np.float32)
  scale = np.exp(rng.uniform(-0.2 * a, 0.2 * a, n))
  angle = np.deg2rad(rng.uniform(-12.0 * a, 12.0 * a, n))
  shear = rng.uniform(-0.25 * a, 0.25 * a, n)
  shift = rng.uniform(-0.08 * a, 0.08 * a, (n, 2)) * s
  noise_level = rng.uniform(0.0, noise * a, n).astype(np.float32)
  gaussian = rng.standard_normal((n, image_size, image_size), np.float32)

  # Stroke weight: blend towards the 3 x 3 dilation (bolder) or, at most half way so that hairlines
  # stay, towards the erosion (thinner).
  thick = base.astype(np.float32) / 255.0
  bold, thin = weight > 0, weight < 0
  w = weight[:, None, None]
  thick[bold] += w[bold] * (_grey_morphology(thick[bold], True) - thick[bold])
  thick[thin] += -0.5 * w[thin] * (_grey_morphology(thick[thin], False) - thick[thin])

  # Canvas pixel centres, centred; each mapped back through the inverse of the forward map
  # rotate(shear(scale(p))) + shift, sampled bilinearly, then 2 x 2 averaged to the image size.
  centre = (s - 1) / 2.0
  t = np.arange(s) - centre
  yy, xx = np.meshgrid(t, t, indexing="ij")
  grid = np.stack([xx.ravel(), yy.ravel()])  # [2, P]
  cos, sin = np.cos(angle), np.sin(angle)
  fwd = np.empty((n, 2, 2))
  fwd[:, 0, 0] = scale * cos
  fwd[:, 0, 1] = scale * (cos * shear - sin)
  fwd[:, 1, 0] = scale * sin
  fwd[:, 1, 1] = scale * (sin * shear + cos)
  inv = np.linalg.inv(fwd).astype(np.float32)
  src = np.einsum("nij,njp->nip", inv, (grid[None] - shift[:, :, None]).astype(np.float32))
  src += np.float32(centre)
  x, y = src[:, 0], src[:, 1]
  x0, y0 = np.floor(x), np.floor(y)
  fx, fy = x - x0, y - y0
  x0, y0 = x0.astype(np.int32), y0.astype(np.int32)
  flat = np.pad(thick, ((0, 0), (1, 1), (1, 1))).reshape(n, (s + 2) * (s + 2))
  rows = np.arange(n)[:, None]

  def tap(yi: np.ndarray, xi: np.ndarray) -> np.ndarray:
    # Index into the padded canvas; everything outside reads its zero border.
    idx = np.clip(yi + 1, 0, s + 1) * (s + 2) + np.clip(xi + 1, 0, s + 1)
    return flat[rows, idx]

  warped = (tap(y0, x0) * (1 - fx) + tap(y0, x0 + 1) * fx) * (1 - fy)
  warped += (tap(y0 + 1, x0) * (1 - fx) + tap(y0 + 1, x0 + 1) * fx) * fy
  h = image_size
  small = warped.reshape(n, h, 2, h, 2).mean(axis=(2, 4))
  small += noise_level[:, None, None] * gaussian
  return np.round(np.clip(small, 0.0, 1.0) * 255.0).astype(np.uint8)


def _cache_key(**params) -> str:
  import PIL  # pylint: disable=g-import-not-at-top

  text = repr(sorted(params.items())) + f"|v{_FORMAT_VERSION}|pillow{PIL.__version__}"
  return hashlib.sha256(text.encode()).hexdigest()[:20]


def _generate(
  min_typefaces: int,
  image_size: int,
  copies: int,
  strength: float,
  noise: float,
  seed: int,
  font_dir: str,
) -> dict[str, dict[str, np.ndarray]]:
  """Both splits' arrays (uint8 images), from one drawing of every character."""
  faces = _faces(font_dir)
  side = _OVERSAMPLE * image_size
  points, supers, glyphs, face_ids, classes = _classes(faces, min_typefaces, side)
  train_classes = _split_classes(points, supers)
  names = sorted(set(supers))
  super_ids = np.array([names.index(s) for s in supers], np.int32)
  out = {}
  for i, split in enumerate(("train", "test")):
    mine = train_classes[classes] == (split == "train")
    rng = np.random.default_rng([seed, i])
    images = np.concatenate(
      [_augment(glyphs[mine], image_size, strength, noise, rng) for _ in range(copies)]
    )
    c = np.tile(classes[mine], copies)
    out[split] = {
      "images": images[..., None],
      "labels": points.astype(np.int32)[c],
      "super_labels": super_ids[c],
      "typefaces": np.tile(face_ids[mine], copies),
    }
  return out


def _save(path: str, arrays: dict[str, np.ndarray]) -> None:
  """Writes `arrays` to `path` atomically: readers see no file or the whole file."""
  directory = os.path.dirname(path)
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, suffix=".npz.tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      # numpy's stub types **kwds against its `allow_pickle: bool` keyword too; the keys here are
      # the array names.
      np.savez(f, **arrays)  # type: ignore[arg-type]
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def load_glyphs(
  split: str = "train",
  *,
  min_typefaces: int = 12,
  image_size: int = 32,
  copies: int = 1,
  strength: float = 1.0,
  noise: float = 0.1,
  seed: int = 0,
  cache_dir: str | os.PathLike | None = None,
  font_dir: str | os.PathLike | None = None,
) -> LabeledImages:
  """Unicode characters drawn in matplotlib's typefaces, augmented, split by class.

  One class per character that at least `min_typefaces` of the 21 typefaces draw (16 with a
  Unicode cmap: DejaVu Sans, Sans Mono, Serif and STIX General in four styles; and, for the ASCII
  letters and digits only, 5 Computer Modern faces). Whitespace, control and combining characters
  are left out, and so is a typeface's drawing of a character when it is empty or its missing-glyph
  box although its cmap lists the character. Each (character, typeface) pair gives `copies`
  images, each drawn centred at 0.6 of a canvas twice the image side, then augmented with its own
  random stroke weight (blend towards a 3 x 3 dilation or erosion), scale (x e^U(-0.2, 0.2)),
  rotation (U(-12, 12) degrees), shear (U(-0.25, 0.25)), translation (U(-0.08, 0.08) of the side)
  and Gaussian noise (sigma U(0, noise), 0.1 by default), every range times `strength`, and warped
  down bilinearly.

  Labels are the characters' code points; super-labels index the sorted super-class names: the
  script of a letter (Latin, Greek, Cyrillic, Armenian, Georgian, ...) and the Unicode block of any
  other character (Arrows, Box Drawing, Mathematical Operators, ...), blocks of fewer than 4
  characters merged into "Other". The split is class-disjoint and fixed (independent of `seed`):
  half of each super-class's characters train (rounded down), the others test.

  With the defaults (both splits generated together on first use, then read from the cache;
  16 MB per split): train 1,155 classes, 15,848 images, 26 super-classes; test 1,165 classes,
  15,864 images, the same 26 super-classes. With `min_typefaces=16, image_size=16, strength=0.5`
  (the training job's `dataset="glyphs"`): 359 classes and 5,879 images in train, 359 and 5,919
  in test, 9 super-classes.

  Images are cached in `cache_dir` (default `$XDG_CACHE_HOME/jaxrank/glyphs`, else
  `~/.cache/jaxrank/glyphs`) in one file per split and parameters, written atomically; the same
  parameters give the same images bit for bit on one installation (the drawings depend on the
  Pillow/FreeType version, which is part of the cache key).

  Args:
    split: `"train"` or `"test"`.
    min_typefaces: the fewest typefaces that must draw a character for it to be a class, 1 to 21.
    image_size: the side of the square images, in pixels (>= 8).
    copies: augmented images per (character, typeface) pair (>= 1).
    strength: multiplies every augmentation range; 0 gives the plain drawings.
    noise: the largest standard deviation of the added Gaussian noise, before `strength`
      (ink is 1); 0 leaves the background exactly 0.
    seed: the seed of the augmentation; another seed gives other images of the same classes.
    cache_dir: where generated splits are stored; None for the default.
    font_dir: the folder of the typefaces; None for matplotlib's `mpl-data/fonts/ttf`.

  Returns:
    `LabeledImages` with float32 images `[N, image_size, image_size, 1]` in [0, 1] (ink 1 on 0),
    int32 labels `[N]` (code points) and int32 super-labels `[N]`.

  Raises:
    FileNotFoundError: the typefaces are not in `font_dir` (matplotlib missing or stripped).

  >>> import tempfile
  >>> from jaxrank.data import load_glyphs
  >>> test = load_glyphs("test", min_typefaces=20, image_size=16, cache_dir=tempfile.mkdtemp())
  >>> test.images.shape, sorted(set(chr(c) for c in test.labels))[:5]
  ((651, 16, 16, 1), ['0', '2', '3', '4', '7'])
  """
  fn = "load_glyphs"
  if split not in ("train", "test"):
    raise ValueError(f"{fn}: split must be 'train' or 'test', got {split!r}.")
  for name, value, low in (
    ("min_typefaces", min_typefaces, 1),
    ("image_size", image_size, 8),
    ("copies", copies, 1),
    ("seed", seed, 0),
  ):
    checks.check_int_at_least(fn, name, value, low)
  if min_typefaces > len(_UNICODE_FACES) + len(_TEX_FACES):
    raise ValueError(
      f"{fn}: min_typefaces must be at most {len(_UNICODE_FACES) + len(_TEX_FACES)} (the "
      f"typefaces there are), got {min_typefaces}."
    )
  strength = checks.check_real(fn, "strength", strength, at_least=0.0, at_most=2.0, static=True)
  noise = checks.check_real(fn, "noise", noise, at_least=0.0, at_most=1.0, static=True)
  font_dir = os.fspath(font_dir) if font_dir is not None else _font_dir()
  cache_dir = os.fspath(cache_dir) if cache_dir is not None else _default_cache_dir()
  params = {
    "min_typefaces": min_typefaces,
    "image_size": image_size,
    "copies": copies,
    "strength": strength,
    "noise": noise,
    "seed": seed,
    "font_dir": os.path.abspath(font_dir),
  }
  key = _cache_key(**params)
  path = os.path.join(cache_dir, f"glyphs-{split}-{key}.npz")
  if os.path.isfile(path):
    with np.load(path) as cached:
      arrays = {k: cached[k] for k in cached.files}
  else:
    both = _generate(min_typefaces, image_size, copies, strength, noise, seed, font_dir)
    for name, split_arrays in both.items():
      _save(os.path.join(cache_dir, f"glyphs-{name}-{key}.npz"), split_arrays)
    arrays = both[split]
  return LabeledImages(
    images=arrays["images"].astype(np.float32) / np.float32(255.0),
    labels=arrays["labels"],
    super_labels=arrays["super_labels"],
    image_format="array",
  )
