"""Text a submission wrote, made safe to show: one line, no control characters.

A failure's message, a student's id (their folder's name) and anything else the grader
prints or writes for Gradescope can come from the submission. A terminal escape in it
could set the window title, clear the screen or print a fake score; a newline could add a
line that looks like the grader's own. ``shown`` writes each control, format or unassigned
character (Unicode category C: escapes, newlines, bidirectional overrides) as its escape.
"""

from __future__ import annotations

import unicodedata


def shown(text: str) -> str:
    """``text`` with every character of Unicode category C written as ``\\xNN`` or ``\\uNNNN``."""
    return "".join(_escape(character) if unicodedata.category(character).startswith("C") else character for character in text)


def _escape(character: str) -> str:
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
