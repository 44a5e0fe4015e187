"""Text spans every perturbation must respect: LaTeX math (kept whole) and LaRA's blank marker."""

from __future__ import annotations

import re

BLANK = "[BLANK]"

MATH_SPAN = re.compile(r"\$\$.+?\$\$|\$.+?\$|\\\(.+?\\\)|\\\[.+?\\\]", re.DOTALL)
