//! The conversations of a ChatterBot corpus file: the YAML subset those files use
//! (`conversations:` followed by `- - first turn` / `  - next turn` items, plain, quoted or
//! `|` block scalars), read without a YAML library.

/// The conversations of one corpus file, each a list of alternating turns (user first).
pub fn conversations(text: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = text.lines().collect();
    let Some(start) = lines.iter().position(|l| l.trim_end() == "conversations:") else {
        return Vec::new();
    };
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut i = start + 1;
    while i < lines.len() {
        let line = lines[i];
        let (new_conversation, item) = if let Some(rest) = line.strip_prefix("- - ") {
            (true, rest)
        } else if let Some(rest) = line.trim_start().strip_prefix("- ") {
            if line.starts_with("- ") || line.trim().is_empty() {
                i += 1;
                continue;
            }
            (false, rest)
        } else if !line.starts_with(' ') && !line.trim().is_empty() {
            break;
        } else {
            i += 1;
            continue;
        };
        let content_indent = line.len() - item.len();
        let (value, used) = scalar(item, &lines[i + 1..], content_indent);
        i += 1 + used;
        if new_conversation {
            out.push(Vec::new());
        }
        if let Some(conversation) = out.last_mut() {
            conversation.push(value);
        }
    }
    out.retain(|c| c.len() >= 2 && c.iter().all(|t| !t.trim().is_empty()));
    out
}

/// The value of a scalar starting with `item`, continued on the following `rest` lines when
/// it is a block (`|`, `>`) or a multi-line plain scalar; returns it and the lines it used.
fn scalar(item: &str, rest: &[&str], content_indent: usize) -> (String, usize) {
    let item = item.trim_end();
    if item == "|" || item == "|-" || item == ">" || item == ">-" {
        let mut used = 0;
        let mut block: Vec<&str> = Vec::new();
        let width = rest
            .iter()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.len() - l.trim_start().len())
            .unwrap_or(0);
        for line in rest {
            let indent = line.len() - line.trim_start().len();
            if !line.trim().is_empty() && (indent < width || indent <= content_indent - 2) {
                break;
            }
            block.push(line.get(width..).unwrap_or(""));
            used += 1;
        }
        while block.last().is_some_and(|l| l.trim().is_empty()) {
            block.pop();
        }
        let text = if item.starts_with('>') {
            block.join(" ")
        } else {
            block.join("\n")
        };
        return (text, used);
    }
    let mut text = item.to_string();
    let mut used = 0;
    for line in rest {
        let trimmed = line.trim();
        let indent = line.len() - line.trim_start().len();
        if trimmed.is_empty() || trimmed.starts_with("- ") || indent < content_indent {
            break;
        }
        text.push(' ');
        text.push_str(trimmed);
        used += 1;
    }
    (unquote(&text), used)
}

/// A quoted scalar's text (`'it''s'`, `"a \"b\""`), or the text itself.
fn unquote(text: &str) -> String {
    let text = text.trim();
    if text.len() >= 2 && text.starts_with('\'') && text.ends_with('\'') {
        return text[1..text.len() - 1].replace("''", "'");
    }
    if text.len() >= 2 && text.starts_with('"') && text.ends_with('"') {
        return text[1..text.len() - 1]
            .replace("\\\"", "\"")
            .replace("\\n", "\n");
    }
    text.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_plain_quoted_block_and_multi_turn_items() {
        let text = "\
categories:
- coding
conversations:
- - can you write a loop?
  - |
    Sure:

    ```
    for i in range(3):
        print(i)
    ```
- - 'What''s up?'
  - \"Not much, \\\"you\\\"?\"
  - Fine.
- - lonely question
";
        let got = conversations(text);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0][0], "can you write a loop?");
        assert_eq!(
            got[0][1],
            "Sure:\n\n```\nfor i in range(3):\n    print(i)\n```"
        );
        assert_eq!(got[1], vec!["What's up?", "Not much, \"you\"?", "Fine."]);
    }

    #[test]
    fn a_file_without_conversations_gives_none() {
        assert!(conversations("categories:\n- x\n").is_empty());
    }
}
