//! reStructuredText (the Python documentation's `_sources/*.rst.txt`) to plain sections: a
//! title and Markdown-like prose, with literal blocks fenced as code and roles reduced to their
//! text, as a chat assistant would write them.

/// One section of a document: its heading and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The heading text.
    pub title: String,
    /// Paragraphs separated by blank lines.
    pub body: String,
}

/// Directives whose indented body is markup for the documentation build, not prose.
const DROPPED_DIRECTIVES: &[&str] = &[
    "index",
    "toctree",
    "highlight",
    "only",
    "sectionauthor",
    "moduleauthor",
    "tabularcolumns",
    "raw",
    "include",
    "literalinclude",
    "image",
    "figure",
    "productionlist",
    "csv-table",
    "list-table",
    "table",
    "audit-event",
    "opcode",
    "c:macro",
    "c:type",
    "c:var",
    "c:member",
    "c:function",
];

/// Directives whose body is code.
const CODE_DIRECTIVES: &[&str] = &["code-block", "sourcecode", "code", "testcode", "doctest"];

/// Splits an rst document into sections at its headings (a line underlined by `=`, `-`, `*`,
/// `~`, `^` or `#`). Text before the first heading is dropped; sections whose body is empty
/// after cleaning are skipped.
pub fn sections(text: &str) -> Vec<Section> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut title: Option<String> = None;
    let mut body: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some((heading, used)) = heading_at(&lines, i) {
            push_section(&mut out, title.take(), &body);
            body.clear();
            title = Some(inline(&heading));
            i += used;
            continue;
        }
        body.push(lines[i]);
        i += 1;
    }
    push_section(&mut out, title, &body);
    out
}

fn push_section(out: &mut Vec<Section>, title: Option<String>, body: &[&str]) {
    let Some(title) = title else { return };
    let body = clean_body(body);
    if !title.is_empty() && !body.is_empty() {
        out.push(Section { title, body });
    }
}

/// Whether `line` is a heading adornment (one repeated punctuation character, 3 or more).
fn is_adornment(line: &str) -> bool {
    let line = line.trim_end();
    let mut chars = line.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    "=-*~^#\"+".contains(first) && line.len() >= 3 && chars.all(|c| c == first)
}

/// A heading starting at line `i` (with an optional overline): its text and how many lines it
/// spans.
fn heading_at(lines: &[&str], i: usize) -> Option<(String, usize)> {
    let text = |j: usize| lines.get(j).map(|l| l.trim()).unwrap_or("");
    if is_adornment(lines[i]) && !text(i + 1).is_empty() && is_adornment(text(i + 2)) {
        return Some((text(i + 1).to_string(), 3));
    }
    let starts_text = !lines[i].starts_with(' ') && !text(i).is_empty() && !is_adornment(lines[i]);
    if starts_text && is_adornment(text(i + 1)) && text(i + 1).len() >= text(i).len().min(3) {
        return Some((text(i).to_string(), 2));
    }
    None
}

/// The indentation width of `line`.
fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Cleans a section body: directives, comments and labels dropped or reduced, literal blocks
/// fenced, roles and inline markup reduced to text.
fn clean_body(lines: &[&str]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    let mut literal_next = false;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix(".. ") {
            let base = indent(line);
            let end = block_end(lines, i + 1, base);
            let directive = rest.split("::").next().unwrap_or("").trim();
            let argument = rest.split_once("::").map(|(_, a)| a.trim()).unwrap_or("");
            let is_directive = rest.contains("::") && !directive.contains(' ');
            if is_directive && CODE_DIRECTIVES.contains(&directive) {
                push_code(&mut out, &lines[i + 1..end]);
            } else if is_directive && !DROPPED_DIRECTIVES.contains(&directive) {
                if !argument.is_empty() && !directive.starts_with("version") {
                    out.push(format!("`{}`", inline(argument)));
                    out.push(String::new());
                }
                let body: Vec<&str> = lines[i + 1..end]
                    .iter()
                    .filter(|l| !l.trim_start().starts_with(':'))
                    .copied()
                    .collect();
                let inner = clean_body(&dedent(&body));
                if !inner.is_empty() {
                    out.push(inner);
                    out.push(String::new());
                }
            }
            i = end;
            continue;
        }
        if literal_next && !trimmed.is_empty() && indent(line) > 0 {
            let end = block_end(lines, i, 0);
            push_code(&mut out, &lines[i..end]);
            literal_next = false;
            i = end;
            continue;
        }
        if !trimmed.is_empty() {
            literal_next = false;
        }
        let mut text = line.trim_end().to_string();
        if text.ends_with("::") {
            literal_next = true;
            text.truncate(text.len() - 2);
            let kept = text.trim_end();
            text = if kept.is_empty() || kept.ends_with(':') {
                kept.to_string()
            } else {
                format!("{kept}:")
            };
            if text.trim().is_empty() {
                i += 1;
                continue;
            }
        }
        out.push(inline(&text));
        i += 1;
    }
    collapse_blank_lines(&out.join("\n"))
}

/// The end of the indented block starting at `start` (lines blank or indented beyond `base`).
fn block_end(lines: &[&str], start: usize, base: usize) -> usize {
    let mut end = start;
    let mut last_content = start;
    while end < lines.len() {
        let l = lines[end];
        if l.trim().is_empty() {
            end += 1;
            continue;
        }
        if indent(l) <= base {
            break;
        }
        end += 1;
        last_content = end;
    }
    last_content.max(start)
}

/// Lines with their common indentation removed.
fn dedent<'a>(lines: &[&'a str]) -> Vec<&'a str> {
    let width = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| indent(l))
        .min()
        .unwrap_or(0);
    lines
        .iter()
        .map(|l| if l.len() >= width { &l[width..] } else { "" })
        .collect()
}

/// Appends `lines` (dedented) as a fenced code block.
fn push_code(out: &mut Vec<String>, lines: &[&str]) {
    let code: Vec<&str> = dedent(lines);
    let body = code.join("\n");
    let body = body.trim_matches('\n');
    if body.trim().is_empty() {
        return;
    }
    out.push(String::new());
    out.push(format!("```python\n{body}\n```"));
    out.push(String::new());
}

/// Inline markup to text: `:role:`text``, `` ``code`` ``, `*emphasis*` and reference
/// targets.
pub fn inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(['`', ':']) {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        if let Some(stripped) = tail.strip_prefix("``") {
            if let Some(end) = stripped.find("``") {
                out.push('`');
                out.push_str(&stripped[..end]);
                out.push('`');
                rest = &stripped[end + 2..];
                continue;
            }
        }
        if let Some((content, after)) = role_at(tail) {
            out.push('`');
            out.push_str(&role_text(content));
            out.push('`');
            rest = after;
            continue;
        }
        if let Some(stripped) = tail.strip_prefix('`') {
            if let Some(end) = stripped.find('`') {
                out.push_str(&role_text(&stripped[..end]));
                let after = &stripped[end + 1..];
                rest = after
                    .strip_prefix("__")
                    .or(after.strip_prefix('_'))
                    .unwrap_or(after);
                continue;
            }
        }
        out.push_str(&tail[..1]);
        rest = &tail[1..];
    }
    out.push_str(rest);
    out
}

/// A role `:name:`content`` at the start of `text`: its content and what follows.
fn role_at(text: &str) -> Option<(&str, &str)> {
    let inner = text.strip_prefix(':')?;
    let name_end = inner.find(':')?;
    let name = &inner[..name_end];
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == ':' || c == '_';
    if name.is_empty() || !name.chars().all(valid) {
        return None;
    }
    let after_name = inner[name_end + 1..].strip_prefix('`')?;
    let end = after_name.find('`')?;
    Some((&after_name[..end], &after_name[end + 1..]))
}

/// The text of a role's content: `Title <target>` gives `Title`, `!name` and `~a.b` give
/// `name` and `b`.
fn role_text(content: &str) -> String {
    let content = match content.rfind(" <") {
        Some(cut) if content.ends_with('>') => &content[..cut],
        _ => content,
    };
    let content = content.trim_start_matches('!');
    match content.strip_prefix('~') {
        Some(path) => path.rsplit('.').next().unwrap_or(path).to_string(),
        None => content.to_string(),
    }
}

/// Trims lines' ends and keeps at most one blank line in a row.
fn collapse_blank_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = true;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            if !blank {
                out.push('\n');
            }
            blank = true;
            continue;
        }
        out.push_str(line);
        out.push('\n');
        blank = false;
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduces_roles_and_inline_markup() {
        assert_eq!(
            inline("the :keyword:`!if` statement, see :ref:`matching <tut-match>`"),
            "the `if` statement, see `matching`"
        );
        assert_eq!(
            inline("call ``len(x)`` on :func:`~os.path.join`"),
            "call `len(x)` on `join`"
        );
        assert_eq!(inline("a `link <https://x>`_ here"), "a link here");
        assert_eq!(inline("ratio 3:4 stays"), "ratio 3:4 stays");
    }

    #[test]
    fn splits_sections_and_fences_literal_blocks() {
        let text = "\
.. _tut-if:

*****
Title
*****

Intro text.

:keyword:`if` Statements
========================

.. index::
   statement: if

For example::

   >>> x = 1
   >>> x
   1

Done.
";
        let got = sections(text);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].title, "Title");
        assert_eq!(got[0].body, "Intro text.");
        assert_eq!(got[1].title, "`if` Statements");
        assert_eq!(
            got[1].body,
            "For example:\n\n```python\n>>> x = 1\n>>> x\n1\n```\n\nDone."
        );
    }

    #[test]
    fn keeps_prose_directives_and_drops_markup_ones() {
        let text = "\
Heading
-------

.. function:: len(s)

   Return the length of *s*.

.. toctree::
   :maxdepth: 2

   intro.rst

.. note::

   Be careful.
";
        let got = sections(text);
        assert_eq!(
            got[0].body,
            "`len(s)`\n\nReturn the length of *s*.\n\nBe careful."
        );
    }
}
