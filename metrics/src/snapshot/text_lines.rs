//! Splits Prometheus text exposition (format 0.0.4) into typed lines.

use super::float_serde::parse_prometheus_float;
use super::metric::Labels;

/// One line of exposition text.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Line {
    /// Empty line, `# HELP` line or free comment.
    Ignored,
    /// `# TYPE <family> <type>`.
    Type {
        /// Family name.
        family: String,
        /// The type word as written (`counter`, `gauge`, `histogram`, `summary`, ...).
        kind: String,
    },
    /// `<name>{<labels>} <value> [<timestamp>]`.
    Sample {
        /// Sample name (the family name plus a suffix such as `_bucket`, or equal to it).
        name: String,
        /// The sample's labels.
        labels: Labels,
        /// The sample's value.
        value: f64,
    },
}

/// Parses one line; the error says what is wrong with it.
pub(crate) fn parse_line(line: &str) -> Result<Line, String> {
    let line = line.trim();
    if line.is_empty() {
        return Ok(Line::Ignored);
    }
    if let Some(comment) = line.strip_prefix('#') {
        return parse_comment(comment);
    }
    parse_sample(line)
}

fn parse_comment(comment: &str) -> Result<Line, String> {
    let mut words = comment.split_whitespace();
    match words.next() {
        Some("TYPE") => {
            let family = words.next().ok_or("TYPE line without a metric name")?;
            check_metric_name(family)?;
            let kind = words
                .next()
                .ok_or_else(|| format!("TYPE line for `{family}` without a type"))?;
            if words.next().is_some() {
                return Err(format!("TYPE line for `{family}` has extra words"));
            }
            Ok(Line::Type {
                family: family.to_owned(),
                kind: kind.to_owned(),
            })
        }
        Some("HELP") => {
            let family = words.next().ok_or("HELP line without a metric name")?;
            check_metric_name(family)?;
            Ok(Line::Ignored)
        }
        _ => Ok(Line::Ignored),
    }
}

fn check_metric_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let valid_start = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':');
    if valid_start && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        Ok(())
    } else {
        Err(format!("`{name}` is not a valid metric name"))
    }
}

fn parse_sample(line: &str) -> Result<Line, String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    check_metric_name(name)?;
    let mut rest = line[name_end..].trim_start();
    let mut labels = Labels::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        rest = parse_labels(after_brace, &mut labels).map_err(|e| format!("`{name}`: {e}"))?;
    }
    let mut fields = rest.split_whitespace();
    let value_text = fields
        .next()
        .ok_or_else(|| format!("sample `{name}` has no value"))?;
    let value = parse_prometheus_float(value_text)
        .ok_or_else(|| format!("sample `{name}` has the value `{value_text}`, not a number"))?;
    if let Some(timestamp) = fields.next() {
        timestamp.parse::<i64>().map_err(|_| {
            format!("sample `{name}` has the timestamp `{timestamp}`, not an integer")
        })?;
    }
    if fields.next().is_some() {
        return Err(format!("sample `{name}` has text after its timestamp"));
    }
    Ok(Line::Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Parses `name="value",...}` (the text after `{`) into `labels`; returns the text after `}`.
fn parse_labels<'a>(mut text: &'a str, labels: &mut Labels) -> Result<&'a str, String> {
    loop {
        text = text.trim_start();
        if let Some(rest) = text.strip_prefix('}') {
            return Ok(rest);
        }
        let name_end = text
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(text.len());
        let name = &text[..name_end];
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!("invalid label name at `{}`", preview(text)));
        }
        text = text[name_end..].trim_start();
        text = text
            .strip_prefix('=')
            .ok_or_else(|| format!("label `{name}` has no `=`"))?
            .trim_start();
        text = text
            .strip_prefix('"')
            .ok_or_else(|| format!("label `{name}` has an unquoted value"))?;
        let (value, rest) = parse_quoted(text).map_err(|e| format!("label `{name}`: {e}"))?;
        if labels.insert(name.to_owned(), value).is_some() {
            return Err(format!("label `{name}` is given twice"));
        }
        text = rest.trim_start();
        if let Some(rest) = text.strip_prefix(',') {
            text = rest;
        } else if !text.starts_with('}') {
            return Err(format!("expected `,` or `}}` after label `{name}`"));
        }
    }
}

/// Reads an escaped label value up to its closing quote; returns it and the text after the quote.
fn parse_quoted(text: &str) -> Result<(String, &str), String> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((index, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &text[index + 1..])),
            '\\' => match chars.next() {
                Some((_, '\\')) => value.push('\\'),
                Some((_, '"')) => value.push('"'),
                Some((_, 'n')) => value.push('\n'),
                Some((_, other)) => return Err(format!("unknown escape `\\{other}`")),
                None => break,
            },
            other => value.push(other),
        }
    }
    Err("value has no closing quote".into())
}

fn preview(text: &str) -> String {
    text.chars().take(20).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(line: &str) -> (String, Labels, f64) {
        match parse_line(line).unwrap() {
            Line::Sample {
                name,
                labels,
                value,
            } => (name, labels, value),
            other => panic!("not a sample: {other:?}"),
        }
    }

    #[test]
    fn samples_with_labels_escapes_and_timestamps() {
        let (name, labels, value) =
            sample(r#"vllm:x_total{model_name="a \"b\"\\c\nd",engine="0",} 12 1700000000000"#);
        assert_eq!(name, "vllm:x_total");
        assert_eq!(labels["model_name"], "a \"b\"\\c\nd");
        assert_eq!(labels["engine"], "0");
        assert_eq!(value, 12.0);
        let (_, labels, value) = sample(r#"h_bucket{le="+Inf"} 3"#);
        assert_eq!(labels["le"], "+Inf");
        assert_eq!(value, 3.0);
        let (name, labels, value) = sample("plain -Inf");
        assert_eq!(
            (name.as_str(), labels.len(), value),
            ("plain", 0, f64::NEG_INFINITY)
        );
        assert_eq!(sample(r#"x{a="}{,"} 1"#).1["a"], "}{,");
    }

    #[test]
    fn comments() {
        assert_eq!(
            parse_line("# TYPE vllm:x counter").unwrap(),
            Line::Type {
                family: "vllm:x".into(),
                kind: "counter".into()
            }
        );
        assert_eq!(
            parse_line("# HELP x some text here").unwrap(),
            Line::Ignored
        );
        assert_eq!(parse_line("# just a comment").unwrap(), Line::Ignored);
        assert_eq!(parse_line("   ").unwrap(), Line::Ignored);
    }

    #[test]
    fn malformed_lines_say_why() {
        let error = |line: &str| parse_line(line).unwrap_err();
        assert!(error("x").contains("has no value"));
        assert!(error("x abc").contains("not a number"));
        assert!(error("x 1 2.5").contains("timestamp"));
        assert!(error("x 1 2 3").contains("after its timestamp"));
        assert!(error("9x 1").contains("not a valid metric name"));
        assert!(error(r#"x{a="1" 1"#).contains("expected `,` or `}`"));
        assert!(error(r#"x{a=1} 1"#).contains("unquoted"));
        assert!(error(r#"x{a="1} 1"#).contains("closing quote"));
        assert!(error(r#"x{a="\t"} 1"#).contains("unknown escape"));
        assert!(error(r#"x{a="1",a="2"} 1"#).contains("twice"));
        assert!(error(r#"x{1a="1"} 1"#).contains("invalid label name"));
        assert!(error("# TYPE x").contains("without a type"));
        assert!(error("# TYPE x counter extra").contains("extra words"));
    }
}
