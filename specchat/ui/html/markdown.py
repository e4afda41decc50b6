"""A reply as readable Markdown with its tokens laid over it. No gradio import.

The reply's text is rendered as Markdown by markdown-it-py (CommonMark with GitHub's tables and
strike-through; raw HTML off, so model text can never become markup; images off, so a reply
cannot make the browser fetch anything), fenced code is highlighted by Pygments, and then every
piece of visible text is wrapped back into the token that wrote it: a ``<span class="tok
tok-KIND tref-R-I">`` per run of characters of one token, so the colours, the hover text and the
click that opens the inspector work inside paragraphs, lists, tables and code alike.

How a rendered character finds its token: Markdown only *removes* characters of the source
(``**``, fences, list markers, backslashes, a paragraph's indentation) and never reorders the rest,
so the rendered text of a block is a subsequence of the block's source. Each character is matched
to the first equal source character at or after the previous match, within the block's own lines
(markdown-it gives them); one that is not found (a character reference such as ``&copy;`` turns
into a character the source does not have) stays outside any token, and the matching goes on.
Whitespace between tags is layout, not text, and is left alone, except inside ``<pre>`` (code),
where it is the indentation the model wrote.

A reply is rendered as a list of top-level blocks (paragraphs, lists, code blocks, tables): a
finished block keeps its HTML (the cache), so a streaming update changes the last block only.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

CODE_STYLE_LIGHT = "default"
CODE_STYLE_DARK = "github-dark"
_TAG = re.compile(r"(<[^>]*>)")
_LANG = re.compile(r"^[\w+#.-]{1,32}$")
LEAD = -3
"""``tok_at`` of a character of a Continue's lead (:func:`continuation_lead`): written in the reply
above, shown muted (``spec-lead``) and belonging to no token of this one."""


@dataclass(frozen=True)
class Piece:
    """One committed token's place in the reply's text: characters ``start`` to ``end`` (end
    exclusive), its kind (``accepted``, ``resampled``, ``bonus``, ``target``), the class that makes
    it clickable (``tref-R-I``, or "" for text that belongs to no token) and its hover text."""

    start: int
    end: int
    kind: str
    ref_class: str
    title: str


def _code_html(code: str, info: str) -> str:
    """A code block: Pygments' spans for a language it knows, else escaped text. Its bar (the
    language and a copy button) is added after the tokens are woven in (:func:`_add_code_bars`),
    so that its words are never taken for the reply's."""
    name = info.split()[0] if info.strip() else ""
    lexer = None
    if _LANG.match(name):
        try:
            lexer = get_lexer_by_name(name, stripnl=False, ensurenl=False)
        except ClassNotFound:
            pass
    body = highlight(code, lexer, _FORMATTER) if lexer is not None else html.escape(code, quote=False)
    label = html.escape(name if _LANG.match(name) else "")
    return (f'<div class="spec-code" data-lang="{label}"><pre><code class="language-{label or "text"}">'
            f"{body}</code></pre></div>\n")


_CODE_OPEN = re.compile(r'<div class="spec-code" data-lang="([^"]*)">')


def _add_code_bars(block_html: str) -> str:
    return _CODE_OPEN.sub(lambda m: m.group(0) + (
        f'<div class="spec-code-bar"><span class="spec-code-lang">{m.group(1)}</span>'
        '<button type="button" class="spec-copy" title="copy the code">copy</button></div>'), block_html)


_FORMATTER = HtmlFormatter(nowrap=True)


def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "breaks": True, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"]).disable("image")

    def open_link(self, tokens, idx, options, env):  # links open beside the chat, never in its place
        tokens[idx].attrSet("target", "_blank")
        tokens[idx].attrSet("rel", "noopener noreferrer")
        return self.renderToken(tokens, idx, options, env)

    md.add_render_rule("link_open", open_link)
    md.add_render_rule("fence", lambda self, tokens, idx, options, env: _code_html(tokens[idx].content, tokens[idx].info))
    md.add_render_rule("code_block", lambda self, tokens, idx, options, env: _code_html(tokens[idx].content, ""))
    return md


MD = _markdown()
USER_MD = _markdown().disable("emphasis")
"""A person's own message: the same Markdown without emphasis, so that what they type shows as typed:
``__repr__`` or ``*args`` outside backticks is a name, not bold or italic text (a new user's try)."""


def open_fence(text: str) -> str:
    """The opening line of the fenced code block ``text`` leaves open at its end (for example
    ``"```python\n"``: a reply cut at its token limit inside a code block), or "" when it ends
    outside one. Only a top-level block counts (one inside a list or a quote is not reopened).
    A Continue renders its text after this line, so the code goes on as code; an export closes
    the block with the same fence. CommonMark's rule: the block is closed by a line of the same
    fence character, at least as long, indented less than four spaces."""
    tokens = MD.parse(text, {})
    last = next((t for t in reversed(tokens) if t.level == 0), None)
    if last is None or last.type != "fence" or last.map is None:
        return ""
    lines = text.split("\n")
    start, end = last.map
    body = lines[start + 1:end]
    closing = body[-1].strip() if body else ""
    if (closing and set(closing) == {last.markup[0]} and len(closing) >= len(last.markup)
            and len(body[-1]) - len(body[-1].lstrip(" ")) < 4):
        return ""
    return lines[start] + "\n"


_STRUCTURED_LINE = re.compile(r"^\s*(?:[-*+](?:\s|$)|\d{1,9}(?:[.)](?:\s|$)|$)|#{1,6}(?:\s|$)|\|)")
"""A line whose start gives it its Markdown structure: a list item (or its number alone, cut before
the dot), a heading, a table row."""


def continuation_lead(text: str) -> str:
    """What a Continue's bubble reads before its own text, so that its Markdown renders as the
    reply it writes on (``text``: that reply so far): the fence line of a code block ``text``
    leaves open (:func:`open_fence`: the code goes on as code), then ``text``'s last line when it
    was cut mid-line inside that code, or on a line its start structures (a list item, a heading,
    a table row: :data:`_STRUCTURED_LINE`). Shown muted (:data:`LEAD`), it names the line the
    Continue picks up and keeps its structure: after ``"…9. Lemon\n10"`` the Continue's
    ``". Orange"`` renders as item 10 of a numbered list, not as a paragraph reading ". Orange";
    after ``"3. Cherry is a red fr"`` its ``"uit.\n4. Date…"`` as items 3 and 4 (CommonMark lets
    only a list starting at 1 interrupt a paragraph: "4. Date" after a paragraph is text). A
    paragraph cut mid-line is not repeated (it can be long; the Continue's text goes on alone)."""
    fence = open_fence(text)
    tail = "" if text.endswith("\n") else text.rsplit("\n", 1)[-1]
    if fence and tail and fence == tail + "\n":  # cut on the fence line itself: it is the tail
        return tail
    if not fence and not _STRUCTURED_LINE.match(tail):
        tail = ""
    return fence + tail


def kept_indents(text: str) -> str:
    """``text`` with the leading spaces of each continuation line of a top-level paragraph as
    no-break spaces: Markdown strips them (code pasted without fences would lose its indentation),
    and keeps no-break spaces. Lines Markdown reads otherwise (code, lists, quotes, a paragraph's
    first line) are left as they are. Same length, character for character (a token map over
    ``text`` still fits)."""
    lines = text.split("\n")
    for token in MD.parse(text, {}):
        if token.type == "paragraph_open" and token.level == 0 and token.map is not None:
            for i in range(token.map[0] + 1, token.map[1]):
                body = lines[i].lstrip(" ")
                lines[i] = "\u00a0" * (len(lines[i]) - len(body)) + body
    return "\n".join(lines)


def code_css() -> str:
    """Pygments' colours for highlighted code, light and (under Gradio's ``.dark``) dark."""
    rules = []
    for style, scope in ((CODE_STYLE_LIGHT, ".spec-code pre"), (CODE_STYLE_DARK, ".dark .spec-code pre")):
        defs = HtmlFormatter(style=style).get_style_defs(scope)
        # only the token colours: no background, no line numbers, nothing outside the scope
        rules += [line for line in defs.splitlines() if line.startswith(scope + " .") and "linenos" not in line
                  and not line.startswith(scope + " .hll")]
    return "\n".join(rules)


def render_blocks(source: str, tok_at: Sequence[int], pieces: Sequence[Piece], rejected: dict[int, str],
                  cache: dict, md: MarkdownIt = MD) -> list[str | dict]:
    """The reply's HTML, one item per top-level block, tokens woven in: a string, or for a code
    block its lines (:func:`code_lines`; :func:`block_html` makes any item a string).

    Args:
        source: the reply's text.
        tok_at: for each character of ``source``, the index of its piece in ``pieces`` (−1: none).
        pieces: the tokens (see :class:`Piece`).
        rejected: piece index → HTML of the drafts its round threw away (shown before it; the page
            hides them unless "show rejected drafts" is on).
        cache: kept by the caller between calls for the same reply: a block whose lines and
            tokens are unchanged is not rendered again (the same string object comes back).
        md: the parser (:data:`MD` for a reply; :data:`USER_MD` for a person's message).
    """
    env: dict = {}
    tokens = md.parse(source, env)
    line_starts = [0] + [m.end() for m in re.finditer("\n", source)]

    def char_of(line: int) -> int:
        return line_starts[line] if line < len(line_starts) else len(source)

    out, i = [], 0
    while i < len(tokens):
        first, depth = i, 0
        while True:  # one top-level block: its opening token to the matching close
            depth += tokens[i].nesting
            i += 1
            if depth <= 0:
                break
        block = tokens[first:i]
        lines = block[0].map or [0, 0]
        start, end = char_of(lines[0]), char_of(lines[1])
        if block[0].type == "fence":  # the fence line is not text: the code starts on the next line
            start = min(char_of(lines[0] + 1), end)
        marks = sum(1 for k in rejected if k < len(pieces) and start <= pieces[k].start < end)
        key = (start, end, marks, len(env.get("references", {})))
        cached = cache.get(key)
        if cached is None:
            woven = _add_code_bars(weave(md.renderer.render(block, md.options, env), source, start, end, tok_at,
                                         pieces, rejected))
            cached = cache[key] = code_lines(woven) if block[0].type in ("fence", "code_block") else woven
        out.append(cached)
    return out


_CODE_BLOCK = re.compile(r'(<div class="spec-code"[^>]*>.*?<pre><code[^>]*>)(.*)(</code></pre></div>)\s*$', re.S)


def code_lines(block_html: str) -> dict | str:
    """A rendered code block as ``{"head", "lines", "tail"}``: the HTML before the code, each line
    of code on its own (every tag open at a line's end closed there and opened again on the next
    line, so each line is whole HTML), and the HTML after it. The page replaces a code block line
    by line, so a long block streams at the cost of its last lines (:func:`block_html` joins it)."""
    match = _CODE_BLOCK.match(block_html)
    if match is None:
        return block_html
    head, body, tail = match.groups()
    lines: list[str] = []
    current: list[str] = []
    opened: list[str] = []  # the tags open here (Pygments' and the tokens' spans)
    for segment in _TAG.split(body):
        if not segment:
            continue
        if segment.startswith("</"):
            opened.pop()
            current.append(segment)
        elif segment.startswith("<"):
            opened.append(segment)
            current.append(segment)
        else:
            for i, part in enumerate(segment.split("\n")):
                if i:
                    lines.append("".join(current) + "</span>" * len(opened))
                    current = list(opened)
                if part:
                    current.append(part)
    last = "".join(current) + "</span>" * len(opened)
    if _TAG.sub("", _REJECTED_RUN.sub("", last)):  # a line in progress (its newline has not come yet)
        lines.append(last)
    elif _REJECTED_RUN.search(last) and lines:  # drafts rejected at the closing fence: end of the last line
        lines[-1] += last
    return {"head": head, "lines": lines, "tail": tail}


_REJECTED_RUN = re.compile(r'<span class="spec-rejected-run">(?:<span[^>]*>[^<]*</span>)*</span>')


def block_html(block: str | dict) -> str:
    """One block of :func:`render_blocks` as HTML (a code block's lines joined again)."""
    if isinstance(block, str):
        return block
    lines = "".join(f'<span class="spec-line">{line}\n</span>' for line in block["lines"])
    return f'{block["head"]}{lines}{block["tail"]}'


def weave(block_html: str, source: str, start: int, end: int, tok_at: Sequence[int], pieces: Sequence[Piece],
          rejected: dict[int, str]) -> str:
    """Wrap the visible text of one rendered block (``source[start:end]``) into token spans (see
    the module's docstring for how characters are matched). The rejected drafts of a token go
    just before its first character shown, or at the block's last text when none is shown."""
    pending = sorted(k for k in rejected if k < len(pieces) and start <= pieces[k].start < end)
    parts: list[str] = []
    last_text = 0  # where in ``parts`` the block's text ends (for rejected drafts left over)
    p = start
    in_pre = 0  # inside <pre>, blanks are text (indentation); elsewhere blank segments are layout
    for segment in _TAG.split(block_html):
        if segment.startswith("<pre"):
            in_pre += 1
        elif segment.startswith("</pre"):
            in_pre -= 1
        if not segment or segment.startswith("<") or (segment.isspace() and not in_pre):
            parts.append(segment)
            continue
        run: list[str] = []
        run_piece = -2
        for ch in html.unescape(segment):
            q = source.find(ch, p, end)
            piece = -1
            if q >= 0:
                piece = tok_at[q] if q < len(tok_at) else -1
                p = q + 1
                while pending and pieces[pending[0]].start <= q:  # this token's (or an earlier one's) drafts
                    _flush(parts, run, run_piece, pieces, not in_pre)
                    run, run_piece = [], -2
                    parts.append(rejected[pending.pop(0)])
            if piece != run_piece:
                _flush(parts, run, run_piece, pieces, not in_pre)
                run, run_piece = [], piece
            run.append(ch)
        _flush(parts, run, run_piece, pieces, not in_pre)
        last_text = len(parts)
    if pending:
        parts[last_text:last_text] = [rejected[k] for k in pending]
    return "".join(parts)


def _flush(parts: list[str], run: list[str], piece: int, pieces: Sequence[Piece], wraps: bool) -> None:
    """Append ``run`` (characters of one piece, or of none) to ``parts`` as HTML. Where text wraps
    (``wraps``: not code), a comma is followed by ``<wbr>``: "1,2,3,…,200" has no break
    opportunity of its own, and the transcript's ``overflow-wrap: anywhere`` then broke it
    mid-number; ``<wbr>`` adds no character (a copy of the text is unchanged)."""
    if not run:
        return
    text = html.escape("".join(run), quote=False)
    if wraps:
        text = text.replace(",", ",<wbr>")
    if piece == LEAD:
        parts.append(f'<span class="spec-lead" title="written in the reply above">{text}</span>')
        return
    if piece < 0:
        parts.append(text)
        return
    tok = pieces[piece]
    ws = " tok-ws" if text.isspace() else ""
    ref = f" {tok.ref_class}" if tok.ref_class else ""
    parts.append(f'<span class="tok tok-{tok.kind}{ws}{ref}" title="{html.escape(tok.title)}">{text}</span>')
