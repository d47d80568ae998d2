//! A fast reader for the shape most manifests have, giving the same tree as `serde-saphyr`.
//!
//! It reads block mappings and sequences (indentless sequences under a key included), flow
//! collections on one line, plain and quoted scalars on one line, literal block scalars
//! (`|`, `|-`, `|+`), comments and `---` between documents, and gives up (`None`) on
//! everything else: tabs, CRLF, anchors, aliases, tags, merge keys, folded and multi-line
//! scalars, explicit keys, directives, keys that are not strings, duplicate keys, a plain
//! scalar it cannot resolve with certainty (`1_000`, `0x1F`, `1e3`, `2026-01-01`, `12:30`,
//! `.inf`), and anything that is not valid YAML. A file it gives up on is read by
//! `serde-saphyr`, which also says what is wrong with an invalid one. So it never decides
//! anything `serde-saphyr` would decide otherwise: for what it reads, the tree (values,
//! lines, columns, the source bytes of each scalar) is the same, which the differential tests
//! below check over the corpus, the conformance data and generated documents.
//!
//! Why: the general parser reads a few MB/s, and a cold sync of 10,000 objects was mostly
//! spent in it (issue 18); this one reads the same files at more than ten times that.

use super::tree::{Node, NodeKind};

/// Deepest nesting read; deeper is left to `serde-saphyr` (and its budget).
const MAX_DEPTH: usize = 100;
/// Most documents and markers in one stream read here: well inside the general parser's budget
/// (200,000 documents, the empty ones included), which judges longer streams.
const MAX_DOCUMENTS: usize = 100_000;
/// Longest implicit key read here, from its first byte to its `:`: inside YAML's limit of 1024
/// characters (quotes and spaces included), which the general parser judges.
const MAX_KEY: usize = 1000;

/// The documents of `text` that are not empty or null, or `None` when the fast reader does
/// not read this text (see the module documentation).
pub(super) fn parse(text: &str) -> Option<Vec<Node>> {
    if text.len() >= (u32::MAX / 2) as usize || text.bytes().any(|c| c == b'\t' || c == b'\r') {
        return None;
    }
    // Characters YAML does not allow in a stream (controls, DEL, C1 controls other than NEL,
    // noncharacters) and byte-order marks: the general parser says where.
    let unprintable = |c: char| {
        (c < ' ' && c != '\n')
            || c == '\u{7f}'
            || (('\u{80}'..='\u{9f}').contains(&c) && c != '\u{85}')
            || matches!(c, '\u{feff}' | '\u{fffe}' | '\u{ffff}')
    };
    if text.bytes().any(|b| b < b' ' && b != b'\n' || b >= 0x7f) && text.chars().any(unprintable) {
        return None;
    }
    let mut p = Parser {
        src: text,
        b: text.as_bytes(),
        ascii: text.is_ascii(),
        pos: 0,
        line: 1,
        line_start: 0,
        depth: 0,
    };
    p.stream()
}

struct Parser<'a> {
    src: &'a str,
    b: &'a [u8],
    /// Every column is then a byte count.
    ascii: bool,
    pos: usize,
    /// 1-based line of `pos`.
    line: u32,
    /// Byte offset where the line of `pos` starts.
    line_start: usize,
    depth: usize,
}

/// How a plain scalar in block context ended.
enum Plain {
    /// A value: the text ends at `end` (trailing spaces trimmed); the parser is after it.
    Value { end: usize },
    /// A key: the text ends at `end`; the parser is after its `:`.
    Key { end: usize, colon: usize },
}

/// How a literal block scalar keeps its final line breaks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Chomp {
    Clip,
    Strip,
    Keep,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn at(&self, i: usize) -> Option<u8> {
        self.b.get(i).copied()
    }

    /// True when the byte at `i` ends a token: a space, a line break or the end.
    fn blank_at(&self, i: usize) -> bool {
        matches!(self.at(i), None | Some(b' ' | b'\n'))
    }

    fn at_eol(&self) -> bool {
        matches!(self.peek(), None | Some(b'\n'))
    }

    fn skip_spaces(&mut self) {
        while self.peek() == Some(b' ') {
            self.pos += 1;
        }
    }

    /// 1-based character column of byte `i` on the current line.
    fn column(&self, i: usize) -> u32 {
        let n = if self.ascii {
            i - self.line_start
        } else {
            self.src[self.line_start..i].chars().count()
        };
        n as u32 + 1
    }

    fn node(&self, value: NodeKind, at: usize, start: usize, len: usize) -> Node {
        Node {
            value,
            line: self.line,
            column: self.column(at),
            start: start as u32,
            len: len as u32,
        }
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    /// Skips blank and comment lines from a line start (or the line break before it). Leaves
    /// the parser at the start of the next line with content and returns its indentation;
    /// `None` at the end. Never moves past content, so it can be asked again.
    fn next_content(&mut self) -> Option<usize> {
        loop {
            match self.peek() {
                None => return None,
                Some(b'\n') => {
                    self.pos += 1;
                    self.line += 1;
                    self.line_start = self.pos;
                    continue;
                }
                _ => {}
            }
            if self.pos != self.line_start {
                // Only called at a line's start or end.
                return None;
            }
            let mut i = self.pos;
            while self.at(i) == Some(b' ') {
                i += 1;
            }
            match self.at(i) {
                None => {
                    self.pos = i;
                    return None;
                }
                Some(b'\n') => self.pos = i,
                Some(b'#') => {
                    while !matches!(self.at(i), None | Some(b'\n')) {
                        i += 1;
                    }
                    self.pos = i;
                }
                _ => return Some(i - self.pos),
            }
        }
    }

    /// After a node on its line: only spaces, then a comment or the line's end.
    fn end_of_line(&mut self) -> Option<()> {
        let before = self.pos;
        self.skip_spaces();
        match self.peek() {
            None | Some(b'\n') => Some(()),
            Some(b'#') if self.pos > before => {
                while !self.at_eol() {
                    self.pos += 1;
                }
                Some(())
            }
            _ => None,
        }
    }

    /// True when the line at the parser, indented by `indent`, is a document marker
    /// (`---` or `...` at column 1), which ends every collection open.
    fn at_marker(&self, indent: usize) -> bool {
        let rest = &self.b[self.pos..];
        indent == 0
            && (rest.starts_with(b"---") || rest.starts_with(b"..."))
            && self.blank_at(self.pos + 3)
    }

    /// True when the line at the parser (at its indentation) is a sequence entry.
    fn at_dash(&self) -> bool {
        self.peek() == Some(b'-') && self.blank_at(self.pos + 1)
    }

    /// A `---` marker at the parser (column 1): `Some(true)`; another marker, a directive or
    /// `---` with content after it: `None` (not read here); anything else `Some(false)`.
    fn marker(&mut self) -> Option<bool> {
        let rest = &self.b[self.pos..];
        if rest.starts_with(b"---") || rest.starts_with(b"...") {
            if !rest.starts_with(b"---") || !self.blank_at(self.pos + 3) {
                return None;
            }
            self.pos += 3;
            self.end_of_line()?;
            return Some(true);
        }
        if rest.starts_with(b"%") {
            return None;
        }
        Some(false)
    }

    fn stream(&mut self) -> Option<Vec<Node>> {
        let mut docs = Vec::new();
        // After a document's node, the next content must start another document.
        let mut need_marker = false;
        let mut seen = 0usize;
        while let Some(indent) = self.next_content() {
            seen += 1;
            if seen > MAX_DOCUMENTS {
                return None;
            }
            if indent == 0 && self.marker()? {
                need_marker = false;
                continue;
            }
            if need_marker {
                return None;
            }
            self.pos += indent;
            let node = self.block_node(-1)?;
            if node.value != NodeKind::Null {
                docs.push(node);
                if docs.len() > MAX_DOCUMENTS {
                    return None;
                }
            }
            need_marker = true;
        }
        Some(docs)
    }

    /// The node at the parser, in block context; `parent` is the indentation its lines must
    /// exceed.
    fn block_node(&mut self, parent: isize) -> Option<Node> {
        self.enter()?;
        let start = self.pos;
        let node = match self.peek()? {
            b'-' if self.blank_at(start + 1) => self.block_seq(false),
            b'[' | b'{' => {
                let n = self.flow_node(false)?;
                self.skip_spaces();
                if self.peek() == Some(b':') {
                    return None;
                }
                self.end_of_line()?;
                Some(n)
            }
            b'|' => self.literal(parent),
            b'"' | b'\'' => {
                let n = self.quoted()?;
                self.skip_spaces();
                if self.peek() == Some(b':') && self.blank_at(self.pos + 1) {
                    let colon = self.pos;
                    self.pos += 1;
                    self.block_map(start, n, colon)
                } else {
                    self.end_of_line()?;
                    Some(n)
                }
            }
            c if is_indicator(c) => None,
            _ => match self.plain_block()? {
                Plain::Value { end } => {
                    let n = self.plain_node(start, end)?;
                    self.end_of_line()?;
                    Some(n)
                }
                Plain::Key { end, colon } => {
                    let key = self.plain_node(start, end)?;
                    self.block_map(start, key, colon)
                }
            },
        };
        self.leave();
        node
    }

    /// A plain scalar in block context from the parser: up to the line's end, a comment, or a
    /// `: ` that makes it a key.
    fn plain_block(&mut self) -> Option<Plain> {
        let start = self.pos;
        let mut i = start;
        let end = loop {
            match self.at(i) {
                None | Some(b'\n') => break i,
                Some(b' ') if self.at(i + 1) == Some(b'#') => break i,
                Some(b':') if self.blank_at(i + 1) => {
                    let mut end = i;
                    while end > start && self.b[end - 1] == b' ' {
                        end -= 1;
                    }
                    if i - start > MAX_KEY {
                        return None;
                    }
                    self.pos = i + 1;
                    return Some(Plain::Key { end, colon: i });
                }
                _ => i += 1,
            }
        };
        let mut trimmed = end;
        while trimmed > start && self.b[trimmed - 1] == b' ' {
            trimmed -= 1;
        }
        self.pos = end;
        Some(Plain::Value { end: trimmed })
    }

    /// The node of the plain scalar at `start..end` of the current line.
    fn plain_node(&self, start: usize, end: usize) -> Option<Node> {
        let value = resolve(&self.src[start..end])?;
        Some(self.node(value, start, start, end - start))
    }

    /// A block mapping whose first key (`key`, written from `start`) has been read, the parser
    /// after its `:` (at byte `colon`).
    fn block_map(&mut self, start: usize, key: Node, colon: usize) -> Option<Node> {
        let column = self.column(start);
        let indent = (column - 1) as isize;
        let (line, map_start) = (self.line, start);
        let mut entries: Vec<(Node, Node)> = Vec::new();
        let mut key = key;
        let mut colon = colon;
        loop {
            if !matches!(key.value, NodeKind::Str(_))
                || matches!(&key.value, NodeKind::Str(s) if s == "<<")
                || colon - key.start as usize > MAX_KEY
            {
                return None;
            }
            let value = self.map_value(indent, colon)?;
            entries.push((key, value));
            match self.next_content() {
                Some(i) if i as isize == indent && !self.at_marker(i) => {
                    self.pos += i;
                    let at = self.pos;
                    key = match self.peek()? {
                        b'"' | b'\'' => {
                            let k = self.quoted()?;
                            self.skip_spaces();
                            if self.peek() != Some(b':') || !self.blank_at(self.pos + 1) {
                                return None;
                            }
                            colon = self.pos;
                            self.pos += 1;
                            k
                        }
                        c if is_indicator(c) || self.at_dash() => return None,
                        _ => match self.plain_block()? {
                            Plain::Key { end, colon: c } => {
                                colon = c;
                                self.plain_node(at, end)?
                            }
                            Plain::Value { .. } => return None,
                        },
                    };
                }
                Some(i) if (i as isize) < indent || self.at_marker(i) => break,
                None => break,
                Some(_) => return None,
            }
        }
        // Two keys that read the same are the general parser's to report.
        for (i, (k, _)) in entries.iter().enumerate() {
            if entries[..i].iter().any(|(other, _)| other.value == k.value) {
                return None;
            }
        }
        Some(Node {
            value: NodeKind::Map(entries),
            line,
            column,
            start: map_start as u32,
            len: 0,
        })
    }

    /// The value after a key's `:` (at byte `colon`) in a mapping at `indent`.
    fn map_value(&mut self, indent: isize, colon: usize) -> Option<Node> {
        let before = self.pos;
        self.skip_spaces();
        let comment = self.peek() == Some(b'#') && self.pos > before;
        if !self.at_eol() && !comment {
            return match self.peek()? {
                b'-' if self.blank_at(self.pos + 1) => None,
                b'|' => self.literal(indent),
                b'[' | b'{' => {
                    let n = self.flow_node(false)?;
                    self.end_of_line()?;
                    Some(n)
                }
                b'"' | b'\'' => {
                    let n = self.quoted()?;
                    self.end_of_line()?;
                    Some(n)
                }
                c if is_indicator(c) => None,
                _ => {
                    let start = self.pos;
                    match self.plain_block()? {
                        Plain::Value { end } => {
                            let n = self.plain_node(start, end)?;
                            self.end_of_line()?;
                            Some(n)
                        }
                        Plain::Key { .. } => None,
                    }
                }
            };
        }
        self.end_of_line()?;
        let null = self.node(NodeKind::Null, colon, colon, 0);
        match self.next_content() {
            Some(i) if i as isize > indent => {
                self.pos += i;
                let n = self.block_node(indent)?;
                // A scalar alone on the next line may go on over more lines: not read here.
                matches!(n.value, NodeKind::Map(_) | NodeKind::Seq(_)).then_some(n)
            }
            Some(i) if i as isize == indent && !self.at_marker(i) => {
                let line_start = self.pos;
                self.pos += i;
                if self.at_dash() {
                    self.enter()?;
                    let n = self.block_seq(true);
                    self.leave();
                    n
                } else {
                    self.pos = line_start;
                    Some(null)
                }
            }
            _ => Some(null),
        }
    }

    /// A block sequence whose first `-` is at the parser. `indentless`: it hangs under a key
    /// at the key's own indentation (then it ends at the next key).
    fn block_seq(&mut self, indentless: bool) -> Option<Node> {
        let column = self.column(self.pos);
        let indent = (column - 1) as isize;
        let (line, start) = (self.line, self.pos);
        let mut items = Vec::new();
        // Where the first item's first token is: an indentless sequence is placed there.
        let mut first: Option<(u32, u32, u32)> = None;
        loop {
            // At a `-`.
            self.pos += 1;
            let before = self.pos;
            self.skip_spaces();
            if self.at_eol() || (self.peek() == Some(b'#') && self.pos > before) {
                // The item on the next lines: not read here.
                return None;
            }
            if first.is_none() {
                first = Some((self.line, self.column(self.pos), self.pos as u32));
            }
            items.push(self.block_node(indent)?);
            match self.next_content() {
                Some(i) if i as isize == indent && !self.at_marker(i) => {
                    let line_start = self.pos;
                    self.pos += i;
                    if !self.at_dash() {
                        if indentless {
                            self.pos = line_start;
                            break;
                        }
                        return None;
                    }
                }
                Some(i) if (i as isize) < indent || self.at_marker(i) => break,
                None => break,
                Some(_) => return None,
            }
        }
        // An indentless sequence is placed where its first item is, as the general parser does.
        let (line, column, start) = if indentless {
            first?
        } else {
            (line, column, start as u32)
        };
        Some(Node {
            value: NodeKind::Seq(items),
            line,
            column,
            start,
            len: 0,
        })
    }

    /// A flow collection or scalar, all on the current line. `key`: a mapping key inside
    /// `{}` (ends at its `: `).
    fn flow_node(&mut self, key: bool) -> Option<Node> {
        self.enter()?;
        let start = self.pos;
        let node = match self.peek()? {
            b'[' => {
                self.pos += 1;
                let mut items = Vec::new();
                loop {
                    self.skip_spaces();
                    match self.peek()? {
                        b']' if items.is_empty() => {
                            self.pos += 1;
                            break;
                        }
                        b'\n' => return None,
                        _ => {}
                    }
                    let item = self.flow_node(false)?;
                    items.push(item);
                    self.skip_spaces();
                    if self.flow_next(b']')? {
                        break;
                    }
                }
                Some(self.node(NodeKind::Seq(items), start, start, 1))
            }
            b'{' => {
                self.pos += 1;
                let mut entries: Vec<(Node, Node)> = Vec::new();
                loop {
                    self.skip_spaces();
                    match self.peek()? {
                        b'}' if entries.is_empty() => {
                            self.pos += 1;
                            break;
                        }
                        b'\n' => return None,
                        _ => {}
                    }
                    let k = self.flow_node(true)?;
                    // Merge keys are the general parser's to apply.
                    if !matches!(&k.value, NodeKind::Str(s) if s != "<<") {
                        return None;
                    }
                    self.skip_spaces();
                    if self.peek() != Some(b':')
                        || !self.blank_at(self.pos + 1)
                        || self.pos - k.start as usize > MAX_KEY
                    {
                        return None;
                    }
                    self.pos += 1;
                    self.skip_spaces();
                    if matches!(self.peek()?, b',' | b'}' | b'\n') {
                        return None;
                    }
                    let v = self.flow_node(false)?;
                    if entries.iter().any(|(other, _)| other.value == k.value) {
                        return None;
                    }
                    entries.push((k, v));
                    self.skip_spaces();
                    if self.flow_next(b'}')? {
                        break;
                    }
                }
                Some(self.node(NodeKind::Map(entries), start, start, 1))
            }
            b'"' | b'\'' => {
                let n = self.quoted()?;
                // `["a": b]` is a pair in a sequence: not read here.
                let mut i = self.pos;
                while self.at(i) == Some(b' ') {
                    i += 1;
                }
                if !key && self.at(i) == Some(b':') {
                    return None;
                }
                Some(n)
            }
            c if is_indicator(c) => None,
            b'-' if self.blank_at(start + 1) => None,
            _ => {
                let mut i = start;
                loop {
                    match self.at(i) {
                        None | Some(b'\n') => return None,
                        Some(b',' | b']' | b'}') => break,
                        Some(b' ') if self.at(i + 1) == Some(b'#') => return None,
                        Some(b':') if key && self.blank_at(i + 1) => break,
                        Some(b':' | b'[' | b'{' | b'#') => return None,
                        _ => i += 1,
                    }
                }
                let mut end = i;
                while end > start && self.b[end - 1] == b' ' {
                    end -= 1;
                }
                self.pos = end;
                self.plain_node(start, end)
            }
        };
        self.leave();
        node
    }

    /// After an entry of a flow collection closed by `close`: `Some(true)` at the close (the
    /// parser after it), `Some(false)` after a `,` followed by another entry, `None` for
    /// anything else (a trailing comma included: not read here).
    fn flow_next(&mut self, close: u8) -> Option<bool> {
        match self.peek()? {
            b',' => {
                self.pos += 1;
                self.skip_spaces();
                (self.peek() != Some(close)).then_some(false)
            }
            c if c == close => {
                self.pos += 1;
                Some(true)
            }
            _ => None,
        }
    }

    /// A quoted scalar on one line, the parser at its opening quote.
    fn quoted(&mut self) -> Option<Node> {
        let start = self.pos;
        let quote = self.b[start];
        let mut i = start + 1;
        let mut value = String::new();
        let mut run = i;
        loop {
            match self.at(i)? {
                b'\n' => return None,
                b'\'' if quote == b'\'' => {
                    value.push_str(&self.src[run..i]);
                    if self.at(i + 1) == Some(b'\'') {
                        value.push('\'');
                        i += 2;
                        run = i;
                        continue;
                    }
                    break;
                }
                b'"' if quote == b'"' => {
                    value.push_str(&self.src[run..i]);
                    break;
                }
                b'\\' if quote == b'"' => {
                    value.push_str(&self.src[run..i]);
                    let (c, used) = match self.at(i + 1)? {
                        b'\\' => ('\\', 2),
                        b'"' => ('"', 2),
                        b'/' => ('/', 2),
                        b'n' => ('\n', 2),
                        b't' => ('\t', 2),
                        b'r' => ('\r', 2),
                        b'0' => ('\0', 2),
                        b'b' => ('\u{8}', 2),
                        b'f' => ('\u{c}', 2),
                        b'u' => {
                            let hex = self.src.get(i + 2..i + 6)?;
                            if !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                                return None;
                            }
                            (char::from_u32(u32::from_str_radix(hex, 16).ok()?)?, 6)
                        }
                        _ => return None,
                    };
                    value.push(c);
                    i += used;
                    run = i;
                }
                _ => i += 1,
            }
        }
        self.pos = i + 1;
        Some(self.node(NodeKind::Str(value), start, start, self.pos - start))
    }

    /// A literal block scalar, the parser at its `|`; its lines must be indented more than
    /// `parent`.
    fn literal(&mut self, parent: isize) -> Option<Node> {
        self.pos += 1;
        let chomp = match self.peek() {
            Some(b'-') => Chomp::Strip,
            Some(b'+') => Chomp::Keep,
            _ => Chomp::Clip,
        };
        if chomp != Chomp::Clip {
            self.pos += 1;
        }
        if !self.blank_at(self.pos) {
            // An indentation indicator, or anything else.
            return None;
        }
        self.end_of_line()?;
        // The first line sets the indentation; a blank one before it is not read here.
        self.peek()?;
        self.pos += 1;
        self.line += 1;
        self.line_start = self.pos;
        let mut indent = 0;
        while self.at(self.pos + indent) == Some(b' ') {
            indent += 1;
        }
        if self.blank_at(self.pos + indent) || indent as isize <= parent || indent == 0 {
            return None;
        }
        let start = self.pos + indent;
        let (line, column) = (self.line, indent as u32 + 1);
        let mut body = String::new();
        let mut blank = 0usize;
        let end = loop {
            // At a line start.
            if self.pos >= self.b.len() {
                break self.pos;
            }
            let mut spaces = 0;
            while self.at(self.pos + spaces) == Some(b' ') {
                spaces += 1;
            }
            let first = self.pos + spaces;
            if matches!(self.at(first), None | Some(b'\n')) {
                if spaces > indent {
                    return None;
                }
                blank += 1;
                match self.at(first) {
                    // A last line of spaces without a line break: not read here.
                    None if spaces > 0 => return None,
                    None => {
                        self.pos = first;
                        break first;
                    }
                    _ => {
                        self.pos = first + 1;
                        self.line += 1;
                        self.line_start = self.pos;
                        continue;
                    }
                }
            }
            if spaces < indent {
                if self.at(first) == Some(b'#') {
                    return None;
                }
                break first;
            }
            for _ in 0..blank {
                body.push('\n');
            }
            blank = 0;
            let mut eol = first;
            while !matches!(self.at(eol), None | Some(b'\n')) {
                eol += 1;
            }
            // A last line without a line break is not read here.
            self.at(eol)?;
            body.push_str(&self.src[self.pos + indent..eol]);
            body.push('\n');
            self.pos = eol + 1;
            self.line += 1;
            self.line_start = self.pos;
        };
        match chomp {
            Chomp::Clip => {}
            Chomp::Strip => {
                body.pop();
            }
            Chomp::Keep => body.extend(std::iter::repeat_n('\n', blank)),
        }
        // Left at the start of the line that ends it (or the end).
        if end < self.b.len() {
            self.pos = self.line_start;
        }
        Some(Node {
            value: NodeKind::Str(body),
            line,
            column,
            start: start as u32,
            len: (end - start) as u32,
        })
    }
}

/// Characters that start something other than a plain scalar (or a `-` entry).
fn is_indicator(c: u8) -> bool {
    matches!(
        c,
        b'>' | b'&'
            | b'*'
            | b'!'
            | b'?'
            | b'%'
            | b'@'
            | b'`'
            | b'#'
            | b','
            | b']'
            | b'}'
            | b':'
            | b'|'
            | b'['
            | b'{'
            | b'"'
            | b'\''
    )
}

/// What the YAML 1.2 core schema (as `serde-saphyr` reads it, with strict booleans) makes of
/// a plain scalar; `None` when this reader is not sure.
fn resolve(text: &str) -> Option<NodeKind> {
    match text {
        "null" | "Null" | "NULL" | "~" => return Some(NodeKind::Null),
        "true" | "True" | "TRUE" => return Some(NodeKind::Bool(true)),
        "false" | "False" | "FALSE" => return Some(NodeKind::Bool(false)),
        "" => return None,
        _ => {}
    }
    let b = text.as_bytes();
    let first = b[0];
    if !(first.is_ascii_digit() || matches!(first, b'-' | b'+' | b'.')) {
        return Some(NodeKind::Str(text.to_string()));
    }
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    // Plain decimal integers without a sign or leading zeros.
    let int = |s: &[u8]| digits(s) && (s.len() == 1 || s[0] != b'0') && s.len() <= 18;
    if int(b) {
        return text.parse().ok().map(NodeKind::UInt);
    }
    if let Some(rest) = b.strip_prefix(b"-")
        && int(rest)
        && rest != b"0"
    {
        return text.parse().ok().map(NodeKind::Int);
    }
    let unsigned = b.strip_prefix(b"-").unwrap_or(b);
    if let Some(dot) = unsigned.iter().position(|c| *c == b'.')
        && int(&unsigned[..dot])
        && digits(&unsigned[dot + 1..])
    {
        return text.parse().ok().map(NodeKind::Float);
    }
    // No number is written with other letters than these (hex digits, exponents, base
    // prefixes): `10m`, `16Mi`, `100%` are text. Infinities and NaNs are not read here.
    let lower = text.to_ascii_lowercase();
    if lower.contains("inf") || lower.contains("nan") {
        return None;
    }
    let numeric = |c: u8| c.is_ascii_hexdigit() || b"xXoObB_+-.:eE".contains(&c);
    if b.iter().any(|c| !numeric(*c)) {
        return Some(NodeKind::Str(text.to_string()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(text: &str) {
        let fast = parse(text).unwrap_or_else(|| panic!("not read fast:\n{text}"));
        let slow = super::super::tree::parse_documents_saphyr(text, super::super::Mode::Git)
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(fast, slow, "{text}");
    }

    #[test]
    fn the_common_shapes_read_the_same_as_the_general_parser() {
        same(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {app: x, n: \"3\"}\ndata:\n  k: v # c\n",
        );
        same(
            "a:\n- x\n- y: 1\n  z: [1, 2.5, true, null, ~]\nb:\n  - - p\n    - q\n  - r\nc:\nd: 'it''s'\n",
        );
        same(
            "---\n# only a comment\n---\na: |\n  one\n    two\n\nb: |-\n  x\nc: |+\n  y\n\n---\n- 1\n- -2\n",
        );
        same(
            "k: \"a\\\"b\\n\\u00e9\"\n\"q k\": v\nu: héllo wörld\nw: 10m\nx: 16Mi\ny: nginx:1.27\n",
        );
    }

    /// Inputs an attack on this reader found read differently (or read when the general
    /// parser rejects them): each is now read the same or left to the general parser.
    #[test]
    fn what_an_attack_found_is_read_the_same_or_left_to_the_general_parser() {
        let long = |n: usize| "k".repeat(n);
        let mut inputs: Vec<String> = [
            "a: x\u{1}y\n",
            "# \u{1}\na: b\n",
            "a: b # \u{7f}\n",
            "a: \"x\u{80}y\"\n",
            "a: x\u{0}y\n",
            "a: x\u{b}y\n",
            "a: x\u{9c}y\n",
            "a: x\u{fffe}y\n",
            "a: x\u{ffff}y\n",
            "a: \u{feff}x\n",
            "- \u{feff}x\n",
            "a: [\u{feff}x]\n",
            "---\n\u{feff}x\n",
            "\u{feff}a: b\n",
            "a: |+\n  x\n  ",
            "a: |+\n  x\n\n ",
            "a: |+\n  x\n ",
            "a:\n- |\n  x\n",
            "a:\n  b:\n  - |-\n    x\n",
            "a:\n-   |\n    x\n",
            "- a:\n  - |\n    x\n",
            "a: {<<: b}\n",
            "a: {<<: {x: 1}}\n",
            "{<<: {x: 1}, y: 2}\n",
            "- {<<: {x: 1}}\n",
            "a: x\u{85}y\n",
            "a: x\u{a0}y\n",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        inputs.push(format!("\"{}\": v\n", long(1023)));
        inputs.push(format!("'{}': v\n", long(1023)));
        inputs.push(format!("{}  : v\n", long(1023)));
        inputs.push(format!("a{}: v\n", " ".repeat(1024)));
        inputs.push(format!("- {}  : v\n", long(1023)));
        inputs.push(format!("a: {{{}: v}}\n", long(1025)));
        inputs.push(format!("a: {{\"{}\": v}}\n", long(1025)));
        inputs.push("---\n".repeat(200_001));
        inputs.push("---\n~\n".repeat(200_001));
        inputs.push("---\n".repeat(200_000) + "a\n");
        for text in &inputs {
            if let Err(e) = agrees(text) {
                panic!("{:?}: {e}", text.get(..80).unwrap_or(text));
            }
        }
        // And the indentless sequence of literals is still read fast, in the right place.
        assert_eq!(agrees("a:\n- |\n  x\n"), Ok(true));
    }

    #[test]
    fn what_it_cannot_be_sure_of_is_left_to_the_general_parser() {
        for text in [
            "a: 1_000\n",
            "a: 0x1F\n",
            "a: 1e3\n",
            "a: .inf\n",
            "a: 0755\n",
            "a: 2026-01-01\n",
            "a: &x 1\nb: *x\n",
            "a: !!str 1\n",
            "a: >\n  folded\n",
            "a: b\n  c\n",
            "a: 1\na: 2\n",
            "a:\tb\n",
            "a: b\r\n",
            "<<: {a: 1}\n",
            "a: b: c\n",
            "[a]: b\n",
            "a: [b,\n  c]\n",
            "? a\n: b\n",
            "1: a\n",
        ] {
            assert!(parse(text).is_none(), "{text:?}");
        }
    }

    /// Every YAML file under `tests/data` (the corpus and the conformance data), as text.
    fn real_files() -> Vec<(std::path::PathBuf, String)> {
        fn walk(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, String)>) {
            let mut entries: Vec<_> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            entries.sort();
            for path in entries {
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml")
                    && let Ok(text) = std::fs::read_to_string(&path)
                {
                    out.push((path, text));
                }
            }
        }
        let mut out = Vec::new();
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data"),
            &mut out,
        );
        out
    }

    /// What the fast parser reads must read the same with the general one, and what the
    /// general one rejects the fast one must not read.
    fn agrees(text: &str) -> Result<bool, String> {
        let Some(fast) = parse(text) else {
            return Ok(false);
        };
        match super::super::tree::parse_documents_saphyr(text, super::super::Mode::Git) {
            Ok(slow) if slow == fast => Ok(true),
            Ok(slow) => Err(format!("different trees:\nfast {fast:?}\nslow {slow:?}")),
            Err(e) => Err(format!("read fast, rejected by the general parser: {e:?}")),
        }
    }

    #[test]
    fn the_corpus_and_conformance_data_read_the_same_with_both_parsers() {
        let files = real_files();
        assert!(files.len() > 300, "{} files", files.len());
        let mut fast = 0;
        for (path, text) in &files {
            match agrees(text) {
                Ok(read) => fast += usize::from(read),
                Err(e) => panic!("{}: {e}", path.display()),
            }
        }
        eprintln!("{fast} of {} files read fast", files.len());
        // Most real manifests are in the shape the fast parser reads.
        assert!(
            fast * 2 > files.len(),
            "{fast} of {} read fast",
            files.len()
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Real files with a few bytes changed (deleted, or replaced by one of the characters
        /// that matter to YAML): whatever the fast parser still reads, the general parser reads
        /// the same.
        #[test]
        fn damaged_real_files_never_read_differently(
            file in 0usize..10_000,
            edits in proptest::collection::vec((0usize..1_000_000, 0usize..14), 1..4),
        ) {
            static FILES: std::sync::OnceLock<Vec<(std::path::PathBuf, String)>> =
                std::sync::OnceLock::new();
            let files = FILES.get_or_init(real_files);
            let (path, text) = &files[file % files.len()];
            let mut bytes = text.as_bytes().to_vec();
            for (at, what) in edits {
                if bytes.is_empty() {
                    break;
                }
                let at = at % bytes.len();
                let with = b"\n :-#'\"|{}[],0"[what];
                if what == 13 {
                    bytes.remove(at);
                } else {
                    bytes[at] = with;
                }
            }
            if let Ok(text) = String::from_utf8(bytes)
                && let Err(e) = agrees(&text)
            {
                panic!("{} damaged:\n{text}\n{e}", path.display());
            }
        }
    }
}
