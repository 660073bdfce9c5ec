//! Finding the line of a field in pipeline YAML by its path (`stages[2].limits.timeout`), so
//! an error about a value points at that value, not at the first line that looks like it.
//!
//! Block style is followed key by key and item by item; a value written in flow style
//! (`limits: { timeout: 0s }`) is located at the line that holds it. Keys may contain dots
//! (`properties.enable.auto.commit`): a key that is not found whole is tried with the
//! following segments joined to it.

/// One meaningful line: its number, the indent of its content, the content, and whether it
/// opens a sequence item (`- `) whose dash sits at `item`.
struct Line<'a> {
    number: usize,
    indent: usize,
    text: &'a str,
    item: Option<usize>,
}

fn lines(text: &str) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let mut indent = raw.len() - trimmed.len();
        let mut text = trimmed;
        let mut item = None;
        while let Some(rest) = text
            .strip_prefix("- ")
            .or(text.strip_prefix('-').filter(|r| r.is_empty()))
        {
            item.get_or_insert(indent);
            let rest_trim = rest.trim_start();
            indent += text.len() - rest_trim.len();
            text = rest_trim;
        }
        out.push(Line {
            number: i + 1,
            indent,
            text,
            item,
        });
    }
    out
}

enum Segment<'p> {
    Key(&'p str),
    Index(usize),
}

fn segments(path: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            out.push(Segment::Key(key));
        }
        while let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else { break };
            if let Ok(i) = r[..end].parse() {
                out.push(Segment::Index(i));
            }
            rest = &r[end + 1..];
        }
    }
    out
}

fn is_key(text: &str, key: &str) -> bool {
    let bare = text
        .strip_prefix(key)
        .or_else(|| text.strip_prefix(&format!("\"{key}\"")))
        .or_else(|| text.strip_prefix(&format!("'{key}'")));
    bare.is_some_and(|r| r.trim_start().starts_with(':'))
}

/// The 1-based line of the field at `path` (`.` or empty: the file's first line); 0 when the
/// file has no lines.
pub fn line_of_path(text: &str, path: &str) -> usize {
    let all = lines(text);
    let Some(first) = all.first() else { return 0 };
    let segs = segments(path.trim_start_matches('.'));
    // The node being looked into: a range of lines, and the line that holds it.
    let (mut lo, mut hi, mut at) = (0, all.len(), first.number);
    let mut i = 0;
    while i < segs.len() {
        if lo >= hi {
            break;
        }
        let level = all[lo..hi].iter().map(|l| l.indent).min().unwrap_or(0);
        match segs[i] {
            Segment::Index(n) => {
                let dash = all[lo..hi].iter().filter_map(|l| l.item).min();
                let items: Vec<usize> = (lo..hi)
                    .filter(|&j| all[j].item == dash && dash.is_some())
                    .collect();
                let Some(&start) = items.get(n) else { break };
                let end = items.get(n + 1).copied().unwrap_or(hi);
                (lo, hi, at) = (start, end, all[start].number);
                i += 1;
            }
            Segment::Key(_) => {
                // The key, or the key with the next segments joined by dots.
                let mut found = None;
                let mut key = String::new();
                for (k, seg) in segs[i..].iter().enumerate() {
                    let Segment::Key(part) = seg else { break };
                    if k > 0 {
                        key.push('.');
                    }
                    key.push_str(part);
                    if let Some(j) =
                        (lo..hi).find(|&j| all[j].indent == level && is_key(all[j].text, &key))
                    {
                        found = Some((j, k + 1));
                        break;
                    }
                }
                let Some((j, used)) = found else { break };
                let end = (j + 1..hi)
                    .find(|&x| all[x].indent <= all[j].indent)
                    .unwrap_or(hi);
                (lo, hi, at) = (j + 1, end, all[j].number);
                i += used;
            }
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::line_of_path;

    const YAML: &str = "\
name: p
source:
  kafka:
    brokers: b
    properties:
      enable.auto.commit: true
stages:
  - name: a
    plugin: a.wasm
    limits:
      timeout: 1s
  - name: b
    plugin: b.wasm
  # a comment
  -   name: c
      limits:
        memory: 1MiB
        timeout: 0s
  - { name: d, plugin: d.wasm }
runtime:
  drivers: 0
";

    #[test]
    fn fields_are_found_by_path_not_by_first_match() {
        assert_eq!(line_of_path(YAML, "stages[2].limits.timeout"), 18);
        assert_eq!(line_of_path(YAML, "stages[0].limits.timeout"), 11);
        assert_eq!(line_of_path(YAML, "stages[1].name"), 12);
        assert_eq!(line_of_path(YAML, "stages[2].name"), 15);
        assert_eq!(line_of_path(YAML, "runtime.drivers"), 21);
        assert_eq!(
            line_of_path(YAML, "stages[3].plugin"),
            19,
            "flow style: its line"
        );
        assert_eq!(
            line_of_path(YAML, "source.kafka.properties.enable.auto.commit"),
            6,
            "dotted keys"
        );
        assert_eq!(line_of_path(YAML, "."), 1);
        assert_eq!(
            line_of_path(YAML, "stages[9]"),
            7,
            "missing: the nearest parent"
        );
    }
}
