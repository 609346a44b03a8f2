//! SKILL.md frontmatter: find the `---` block, parse its YAML under budgets, check the Agent
//! Skills rules.
//!
//! The YAML is hostile. It is parsed from an event stream (`saphyr-parser`) into a small tree
//! that we build ourselves, so every dimension is bounded here and not by a library default:
//! bytes (before parsing), nesting depth, node count and scalar bytes, with alias expansions
//! charged to the same budgets (a "billion laughs" document fails fast instead of growing).
//! Duplicate keys are refused: a reviewer and an installer must never read different values.
//!
//! Only a missing or unparsable block, or a missing `name`/`description`, rejects
//! (`invalid_skill_md`); every other rule violation is reported as a finding and never grants
//! anything.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use saphyr_parser::{Event, Parser, ScalarStyle};
use serde::{Deserialize, Serialize};

use crate::reason::{Reason, ReasonCode};

/// Bounds on the frontmatter. Generous for real skills (a few hundred bytes), small enough that
/// the worst document costs microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrontmatterLimits {
    /// Bytes between the opening and closing `---` lines.
    pub max_bytes: usize,
    /// Nesting of sequences and mappings.
    pub max_depth: usize,
    /// Nodes built, alias expansions included.
    pub max_nodes: usize,
    /// Scalar bytes built, alias expansions included.
    pub max_scalar_bytes: usize,
}

impl Default for FrontmatterLimits {
    fn default() -> Self {
        Self {
            max_bytes: 64 * 1024,
            max_depth: 16,
            max_nodes: 4096,
            max_scalar_bytes: 256 * 1024,
        }
    }
}

/// Agent Skills limits (agentskills.io specification).
const NAME_MAX_CHARS: usize = 64;
const DESCRIPTION_MAX_CHARS: usize = 1024;
const COMPATIBILITY_MAX_CHARS: usize = 500;

/// The checked frontmatter, as reported. String values are verbatim (JSON escapes them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Frontmatter {
    pub name: String,
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compatibility: Option<String>,
    /// String entries of `metadata` (non-string values are reported as findings, not kept).
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// `allowed-tools`, split on whitespace outside parentheses (`Bash(git add:*)` is one tool).
    #[serde(default)]
    pub allowed_tools: Vec<String>,
    /// Top-level keys the specification does not define, in document order.
    #[serde(default)]
    pub unknown_keys: Vec<String>,
}

/// A non-fatal observation about the frontmatter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub unknown_key: bool,
    /// 1-based line in SKILL.md.
    pub line: u64,
    /// The key concerned.
    pub key: String,
    pub message: String,
}

/// The result of [`parse`]: the frontmatter, its issues, where the body starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub frontmatter: Frontmatter,
    pub issues: Vec<Issue>,
    /// 1-based SKILL.md line of each top-level key.
    pub key_lines: BTreeMap<String, u64>,
}

fn invalid(detail: impl Into<String>) -> Reason {
    Reason::new(ReasonCode::InvalidSkillMd, detail).entry("SKILL.md")
}

/// The YAML text between the delimiter lines and the SKILL.md line it starts on.
struct Block<'a> {
    yaml: &'a str,
    first_line: u64,
}

/// Locate the frontmatter: a first line `---` (after an optional UTF-8 BOM), then YAML, then a
/// line `---`. Lines may end in CRLF; trailing blanks on delimiter lines are tolerated.
fn split<'a>(md: &'a [u8], limits: &FrontmatterLimits) -> Result<Block<'a>, Reason> {
    let md = md.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(md);
    let mut lines = md.split_inclusive(|&b| b == b'\n');
    let is_delim = |line: &[u8]| line.trim_ascii_end() == b"---";
    match lines.next() {
        Some(first) if is_delim(first) => {}
        _ => {
            return Err(invalid(
                "SKILL.md does not start with a `---` frontmatter line",
            ));
        }
    }
    let start = md
        .iter()
        .position(|&b| b == b'\n')
        .map_or(md.len(), |i| i + 1);
    let mut end = start;
    for line in lines {
        if is_delim(line) {
            let raw = &md[start..end];
            let yaml = std::str::from_utf8(raw).map_err(|e| {
                invalid(format!(
                    "frontmatter is not UTF-8 (byte {})",
                    e.valid_up_to()
                ))
            })?;
            return Ok(Block {
                yaml,
                first_line: 2,
            });
        }
        end += line.len();
        if end - start > limits.max_bytes {
            let observed = (end - start) as u64;
            return Err(invalid(format!(
                "frontmatter is larger than {} bytes",
                limits.max_bytes
            ))
            .limit(limits.max_bytes as u64, observed));
        }
    }
    Err(invalid("frontmatter has no closing `---` line"))
}

/// A YAML node, just enough to check the specification's types.
#[derive(Debug, Clone)]
enum Node {
    /// A scalar; `plain` when unquoted and untagged (so subject to core-schema typing).
    Scalar {
        value: String,
        plain: bool,
        str_tag: bool,
        line: u64,
    },
    Seq {
        items: Vec<Node>,
        line: u64,
    },
    Map {
        pairs: Vec<(Node, Node)>,
        line: u64,
    },
}

impl Node {
    fn line(&self) -> u64 {
        match self {
            Node::Scalar { line, .. } | Node::Seq { line, .. } | Node::Map { line, .. } => *line,
        }
    }

    /// The scalar's text when it is a string under the YAML 1.2 core schema.
    fn as_str(&self) -> Option<&str> {
        match self {
            Node::Scalar {
                value,
                plain,
                str_tag,
                ..
            } if *str_tag || !*plain || core_type(value).is_none() => Some(value),
            _ => None,
        }
    }

    /// What it is, for messages.
    fn type_name(&self) -> &'static str {
        match self {
            Node::Scalar {
                value,
                plain,
                str_tag,
                ..
            } => {
                if *str_tag || !*plain {
                    "string"
                } else {
                    core_type(value).unwrap_or("string")
                }
            }
            Node::Seq { .. } => "sequence",
            Node::Map { .. } => "mapping",
        }
    }
}

/// Core-schema type of a plain scalar other than string (YAML 1.2.2, 10.3.2).
fn core_type(s: &str) -> Option<&'static str> {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Some("null"),
        "true" | "True" | "TRUE" | "false" | "False" | "FALSE" => return Some("bool"),
        ".nan" | ".NaN" | ".NAN" => return Some("float"),
        _ => {}
    }
    let unsigned = s.strip_prefix(['-', '+']).unwrap_or(s);
    if matches!(unsigned, ".inf" | ".Inf" | ".INF") {
        return Some("float");
    }
    let digits = |t: &str, radix: u32| !t.is_empty() && t.chars().all(|c| c.is_digit(radix));
    if digits(unsigned, 10)
        || s.strip_prefix("0o").is_some_and(|t| digits(t, 8))
        || s.strip_prefix("0x").is_some_and(|t| digits(t, 16))
    {
        return Some("int");
    }
    // [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
    let (mantissa, exp) = match unsigned.find(['e', 'E']) {
        Some(i) => (&unsigned[..i], Some(&unsigned[i + 1..])),
        None => (unsigned, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((int, frac)) => {
            (int.is_empty() && digits(frac, 10))
                || (digits(int, 10) && (frac.is_empty() || digits(frac, 10)))
        }
        None => digits(mantissa, 10),
    };
    let exp_ok = exp.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e), 10));
    (mantissa_ok && exp_ok).then_some("float")
}

enum Frame {
    Seq {
        items: Vec<Node>,
        anchor: usize,
        line: u64,
        cost: Cost,
    },
    Map {
        pairs: Vec<(Node, Node)>,
        key: Option<Node>,
        anchor: usize,
        line: u64,
        cost: Cost,
    },
}

/// What a subtree cost to build, charged again whenever an alias copies it.
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    nodes: usize,
    bytes: usize,
}

impl Cost {
    fn add(&mut self, other: Cost) {
        self.nodes = self.nodes.saturating_add(other.nodes);
        self.bytes = self.bytes.saturating_add(other.bytes);
    }
}

struct Budget<'l> {
    limits: &'l FrontmatterLimits,
    spent: Cost,
}

impl Budget<'_> {
    fn charge(&mut self, cost: Cost, line: u64) -> Result<(), Reason> {
        self.spent.add(cost);
        if self.spent.nodes > self.limits.max_nodes {
            return Err(invalid(format!(
                "frontmatter line {line}: more than {} YAML nodes (aliases count)",
                self.limits.max_nodes
            ))
            .limit(self.limits.max_nodes as u64, self.spent.nodes as u64));
        }
        if self.spent.bytes > self.limits.max_scalar_bytes {
            return Err(invalid(format!(
                "frontmatter line {line}: more than {} bytes of YAML scalars (aliases count)",
                self.limits.max_scalar_bytes
            ))
            .limit(self.limits.max_scalar_bytes as u64, self.spent.bytes as u64));
        }
        Ok(())
    }
}

/// Parse one YAML document into a [`Node`] tree under the budgets. `None` for an empty document.
fn parse_yaml(
    yaml: &str,
    first_line: u64,
    limits: &FrontmatterLimits,
) -> Result<Option<Node>, Reason> {
    let mut parser = Parser::new_from_str(yaml);
    let mut budget = Budget {
        limits,
        spent: Cost::default(),
    };
    let mut anchors: HashMap<usize, (Node, Cost)> = HashMap::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut root: Option<(Node, Cost)> = None;
    let mut documents = 0u32;
    let line_of = |l: usize| first_line + (l as u64).saturating_sub(1);

    while let Some(next) = parser.next_event() {
        let (event, span) = next.map_err(|e| {
            // The YAML error most real skills make (a description holding `: `, unquoted), said
            // with its fix for the publisher who reads the reason.
            let hint = if e.info().starts_with("mapping values are not allowed") {
                " (a value holding `: ` must be quoted: description: \"Use it: ...\")"
            } else {
                ""
            };
            invalid(format!(
                "frontmatter line {}: YAML error: {}{hint}",
                line_of(e.marker().line()),
                crate::reason::display_name(e.info().as_bytes())
            ))
        })?;
        let line = line_of(span.start.line());
        let done: Option<(Node, Cost, usize)> = match event {
            Event::StreamStart | Event::Nothing | Event::DocumentEnd => None,
            Event::StreamEnd => break,
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(invalid(format!(
                        "frontmatter line {line}: more than one YAML document"
                    )));
                }
                None
            }
            Event::Scalar(value, style, anchor, tag) => {
                let str_tag = tag
                    .as_ref()
                    .is_some_and(|t| t.is_yaml_core_schema() && t.suffix == "str");
                let plain = matches!(style, ScalarStyle::Plain) && tag.is_none();
                let cost = Cost {
                    nodes: 1,
                    bytes: value.len(),
                };
                budget.charge(cost, line)?;
                Some((
                    Node::Scalar {
                        value: value.into_owned(),
                        plain,
                        str_tag,
                        line,
                    },
                    cost,
                    anchor,
                ))
            }
            Event::Alias(id) => {
                let Some((node, cost)) = anchors.get(&id) else {
                    return Err(invalid(format!(
                        "frontmatter line {line}: alias to an unknown anchor"
                    )));
                };
                budget.charge(*cost, line)?;
                Some((node.clone(), *cost, 0))
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if stack.len() >= limits.max_depth {
                    return Err(invalid(format!(
                        "frontmatter line {line}: nested deeper than {} levels",
                        limits.max_depth
                    ))
                    .limit(limits.max_depth as u64, stack.len() as u64 + 1));
                }
                let cost = Cost { nodes: 1, bytes: 0 };
                budget.charge(cost, line)?;
                stack.push(match event {
                    Event::SequenceStart(..) => Frame::Seq {
                        items: Vec::new(),
                        anchor,
                        line,
                        cost,
                    },
                    _ => Frame::Map {
                        pairs: Vec::new(),
                        key: None,
                        anchor,
                        line,
                        cost,
                    },
                });
                None
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(Frame::Seq {
                    items,
                    anchor,
                    line,
                    cost,
                }) => Some((Node::Seq { items, line }, cost, anchor)),
                Some(Frame::Map {
                    pairs,
                    anchor,
                    line,
                    cost,
                    ..
                }) => Some((Node::Map { pairs, line }, cost, anchor)),
                None => {
                    return Err(invalid(format!(
                        "frontmatter line {line}: unbalanced YAML collection"
                    )));
                }
            },
        };
        let Some((node, cost, anchor)) = done else {
            continue;
        };
        if anchor != 0 {
            anchors.insert(anchor, (node.clone(), cost));
        }
        match stack.last_mut() {
            None => {
                if root.is_some() {
                    return Err(invalid(format!(
                        "frontmatter line {line}: more than one YAML document"
                    )));
                }
                root = Some((node, cost));
            }
            Some(Frame::Seq {
                items,
                cost: parent,
                ..
            }) => {
                parent.add(cost);
                items.push(node);
            }
            Some(Frame::Map {
                pairs,
                key,
                cost: parent,
                ..
            }) => {
                parent.add(cost);
                match key.take() {
                    None => *key = Some(node),
                    Some(k) => pairs.push((k, node)),
                }
            }
        }
    }
    Ok(root.map(|(n, _)| n))
}

/// Split, parse and check the frontmatter of `md` (SKILL.md's bytes, possibly a bounded prefix).
pub fn parse(md: &[u8], limits: &FrontmatterLimits) -> Result<Parsed, Reason> {
    let block = split(md, limits)?;
    let root = parse_yaml(block.yaml, block.first_line, limits)?;
    let pairs = match root {
        Some(Node::Map { pairs, .. }) => pairs,
        None => {
            return Err(invalid(
                "frontmatter is empty: `name` and `description` are required",
            ));
        }
        Some(other) => {
            return Err(invalid(format!(
                "frontmatter is a {}, not a mapping",
                other.type_name()
            )));
        }
    };

    let mut fm = Frontmatter::default();
    let mut issues = Vec::new();
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    let mut name = None;
    let mut description = None;
    let merged = merged_pairs(&pairs);
    for (k, v) in pairs
        .iter()
        .map(|(k, v)| (k, v))
        .chain(merged.iter().copied())
    {
        let Some(key) = k.as_str() else {
            return Err(invalid(format!(
                "frontmatter line {}: a {} key",
                k.line(),
                k.type_name()
            )));
        };
        if let Some(first) = seen.insert(key.to_owned(), k.line()) {
            return Err(invalid(format!(
                "frontmatter line {}: duplicate key {:?} (first on line {first})",
                k.line(),
                crate::reason::display_name(key.as_bytes())
            )));
        }
        let line = k.line();
        let mut issue = |message: String| {
            issues.push(Issue {
                unknown_key: false,
                line,
                key: key.to_owned(),
                message,
            })
        };
        match key {
            "name" => name = Some(v),
            "description" => description = Some(v),
            "license" => match v.as_str() {
                Some(s) => fm.license = Some(s.to_owned()),
                None => issue(format!(
                    "license must be a string, found a {}",
                    v.type_name()
                )),
            },
            "compatibility" => match v.as_str() {
                Some(s) => {
                    let n = s.chars().count();
                    if n > COMPATIBILITY_MAX_CHARS {
                        issue(format!(
                            "compatibility is {n} characters, more than {COMPATIBILITY_MAX_CHARS}"
                        ));
                    }
                    if s.trim().is_empty() {
                        issue("compatibility is empty".into());
                    }
                    fm.compatibility = Some(s.to_owned());
                }
                None => issue(format!(
                    "compatibility must be a string, found a {}",
                    v.type_name()
                )),
            },
            "metadata" => match v {
                Node::Map { pairs, .. } => {
                    for (mk, mv) in pairs {
                        let mkey = match mk.as_str() {
                            Some(s) => s,
                            None => {
                                issue(format!(
                                    "metadata has a {} key on line {}",
                                    mk.type_name(),
                                    mk.line()
                                ));
                                continue;
                            }
                        };
                        match mv.as_str() {
                            Some(s) => {
                                if fm.metadata.insert(mkey.to_owned(), s.to_owned()).is_some() {
                                    return Err(invalid(format!(
                                        "frontmatter line {}: duplicate metadata key",
                                        mk.line()
                                    )));
                                }
                            }
                            None => issue(format!(
                                "metadata.{} must be a string, found a {} (line {})",
                                crate::reason::display_name(mkey.as_bytes()),
                                mv.type_name(),
                                mv.line()
                            )),
                        }
                    }
                }
                other => issue(format!(
                    "metadata must be a mapping of strings, found a {}",
                    other.type_name()
                )),
            },
            "allowed-tools" => match v {
                Node::Seq { items, .. } => {
                    issue(
                        "allowed-tools must be a space-separated string, found a sequence".into(),
                    );
                    for item in items {
                        match item.as_str() {
                            Some(s) => fm.allowed_tools.extend(split_tools(s)),
                            None => {
                                issue(format!("allowed-tools has a {} item", item.type_name()));
                                every_scalar(item, &mut fm.allowed_tools);
                            }
                        }
                    }
                }
                _ => match v.as_str() {
                    Some(s) => fm.allowed_tools = split_tools(s),
                    None => {
                        issue(format!(
                            "allowed-tools must be a space-separated string, found a {}",
                            v.type_name()
                        ));
                        // An agent's YAML reader may make tools of it (a map's keys, a nested
                        // list flattened): each scalar in it is reported as a tool requested,
                        // so the policy decides on it and `diff` sees it grow.
                        every_scalar(v, &mut fm.allowed_tools);
                    }
                },
            },
            _ => {
                fm.unknown_keys.push(key.to_owned());
                issues.push(Issue {
                    unknown_key: true,
                    line,
                    key: key.to_owned(),
                    message: format!(
                        "unknown frontmatter key {:?}",
                        crate::reason::display_name(key.as_bytes())
                    ),
                });
            }
        }
    }

    fm.name = required(name, "name")?.to_owned();
    fm.description = required(description, "description")?.to_owned();
    let name_line = seen.get("name").copied().unwrap_or(block.first_line);
    for message in name_violations(&fm.name) {
        issues.push(Issue {
            unknown_key: false,
            line: name_line,
            key: "name".into(),
            message,
        });
    }
    let n = fm.description.chars().count();
    if n > DESCRIPTION_MAX_CHARS {
        let line = seen.get("description").copied().unwrap_or(block.first_line);
        issues.push(Issue {
            unknown_key: false,
            line,
            key: "description".into(),
            message: format!("description is {n} characters, more than {DESCRIPTION_MAX_CHARS}"),
        });
    }
    issues.sort_by_key(|i| i.line);
    Ok(Parsed {
        frontmatter: fm,
        issues,
        key_lines: seen,
    })
}

/// The pairs YAML 1.1 merge keys (`<<: *defaults`, `<<: [*a, *b]`) bring into the top-level
/// mapping: the keys it does not write itself, the first source winning, merges within a
/// source followed. YAML 1.2 has no merge keys, but the YAML 1.1 readers agents use (js-yaml,
/// PyYAML) apply them, so `allowed-tools` given only through one still asks for its tools. The
/// `<<` key itself stays an unknown key for a reviewer to see.
fn merged_pairs(pairs: &[(Node, Node)]) -> Vec<(&Node, &Node)> {
    fn is_merge(k: &Node) -> bool {
        matches!(k, Node::Scalar { value, plain: true, str_tag: false, .. } if value == "<<")
    }
    fn sources<'n>(v: &'n Node, out: &mut Vec<&'n [(Node, Node)]>) {
        match v {
            Node::Map { pairs, .. } => out.push(pairs),
            Node::Seq { items, .. } => {
                for i in items {
                    if let Node::Map { pairs, .. } = i {
                        out.push(pairs);
                    }
                }
            }
            Node::Scalar { .. } => {}
        }
    }
    // Keys already given, in the mapping itself or by an earlier source.
    fn collect<'n>(
        pairs: &'n [(Node, Node)],
        have: &mut BTreeSet<String>,
        out: &mut Vec<(&'n Node, &'n Node)>,
        depth: usize,
    ) {
        let mut own = Vec::new();
        for (k, v) in pairs {
            if is_merge(k) {
                sources(v, &mut own);
            } else if let Some(key) = k.as_str()
                && have.insert(key.to_owned())
                && depth > 0
            {
                out.push((k, v));
            }
        }
        // The nesting of the parsed tree is bounded (16), and so is this.
        if depth < 16 {
            for src in own {
                collect(src, have, out, depth + 1);
            }
        }
    }
    let mut have = BTreeSet::new();
    let mut out = Vec::new();
    collect(pairs, &mut have, &mut out, 0);
    out
}

/// Every scalar beneath `node` (map keys and values, list items), split as tools.
fn every_scalar(node: &Node, out: &mut Vec<String>) {
    match node {
        Node::Scalar { value, .. } => out.extend(split_tools(value)),
        Node::Seq { items, .. } => items.iter().for_each(|i| every_scalar(i, out)),
        Node::Map { pairs, .. } => pairs.iter().for_each(|(k, v)| {
            every_scalar(k, out);
            every_scalar(v, out);
        }),
    }
}

/// `name` and `description` must be present, strings, and not blank.
fn required<'n>(node: Option<&'n Node>, key: &str) -> Result<&'n str, Reason> {
    let Some(node) = node else {
        return Err(invalid(format!("frontmatter has no `{key}`")));
    };
    let Some(s) = node.as_str() else {
        return Err(invalid(format!(
            "frontmatter line {}: `{key}` must be a string, found a {}",
            node.line(),
            node.type_name()
        )));
    };
    if s.trim().is_empty() {
        return Err(invalid(format!(
            "frontmatter line {}: `{key}` is empty",
            node.line()
        )));
    }
    Ok(s)
}

/// Agent Skills `name`: 1-64 characters of a-z, 0-9 and `-`, no leading, trailing or double `-`.
pub fn name_violations(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let n = name.chars().count();
    if n > NAME_MAX_CHARS {
        out.push(format!(
            "name is {n} characters, more than {NAME_MAX_CHARS}"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '-'))
    {
        out.push(format!(
            "name may hold only a-z, 0-9 and `-`, found {:?}",
            c.escape_default().to_string()
        ));
    }
    if name.starts_with('-') || name.ends_with('-') {
        out.push("name must not start or end with `-`".into());
    }
    if name.contains("--") {
        out.push("name must not contain `--`".into());
    }
    out
}

/// Split `allowed-tools` on whitespace (and commas) outside parentheses. A parenthesis never
/// closed would hide every tool after it in one entry (`Read( Bash` read as one tool, base
/// `Read`, past `tools.deny = ["Bash"]`), and how an agent reads such a string is not
/// known: so that entry is reported as written and also split on every separator in it, the
/// reading that grants the most.
pub fn split_tools(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0usize;
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 && (c.is_whitespace() || c == ',') {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push(c);
        }
    }
    if depth > 0 {
        let plain: Vec<String> = cur
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|t| !t.is_empty() && *t != cur)
            .map(str::to_owned)
            .collect();
        out.push(cur);
        out.extend(plain);
    } else if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(md: &str) -> Result<Parsed, Reason> {
        parse(md.as_bytes(), &FrontmatterLimits::default())
    }

    #[test]
    fn an_unclosed_parenthesis_hides_no_tool() {
        assert_eq!(
            split_tools("Bash(git add:*) Read"),
            ["Bash(git add:*)", "Read"]
        );
        assert_eq!(
            split_tools("Bash(git add:*) Read( Write,Bash"),
            [
                "Bash(git add:*)",
                "Read( Write,Bash",
                "Read(",
                "Write",
                "Bash"
            ]
        );
        assert_eq!(split_tools("Read("), ["Read("]);
    }

    fn code(r: Result<Parsed, Reason>) -> String {
        match r {
            Ok(_) => "ok".into(),
            Err(r) => format!("{}: {}", r.code, r.detail),
        }
    }

    #[test]
    fn minimal_crlf_bom() {
        let ok = p("\u{feff}---\r\nname: demo\r\ndescription: A demo\r\n---\r\nbody\r\n")
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(ok.frontmatter.name, "demo");
        assert_eq!(ok.frontmatter.description, "A demo");
        assert!(ok.issues.is_empty());
    }

    #[test]
    fn rejections() {
        for (md, want) in [
            ("name: x\n", "does not start"),
            ("---\nname: x\ndescription: y\n", "no closing"),
            ("---\n---\n", "empty"),
            ("---\n- a\n---\n", "not a mapping"),
            ("---\ndescription: y\n---\n", "no `name`"),
            ("---\nname: x\n---\n", "no `description`"),
            ("---\nname: x\ndescription: \"\"\n---\n", "is empty"),
            ("---\nname: 12\ndescription: y\n---\n", "must be a string"),
            (
                "---\nname: x\nname: y\ndescription: z\n---\n",
                "duplicate key",
            ),
            ("---\nname: [x\ndescription: y\n---\n", "YAML error"),
            (
                "---\nname: x\ndescription: Run it safely: plan first\n---\n",
                "line 3: YAML error: mapping values are not allowed in this context (a value holding `: ` must be quoted",
            ),
            (
                "---\nname: x\ndescription: y\nmetadata:\n\tk: v\n---\n",
                "YAML error",
            ),
        ] {
            let got = code(p(md));
            assert!(
                got.starts_with("invalid_skill_md") && got.contains(want),
                "{md:?}: {got}"
            );
        }
    }

    #[test]
    fn alias_bomb_is_bounded() {
        let mut md = String::from(
            "---\nname: x\ndescription: y\na0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
        );
        for i in 1..10 {
            let p = i - 1;
            md.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        md.push_str("---\n");
        let got = code(p(&md));
        assert!(got.contains("YAML nodes"), "{got}");
    }

    #[test]
    fn depth_and_size_are_bounded() {
        let deep = format!(
            "---\nname: x\ndescription: y\nk: {}{}\n---\n",
            "[".repeat(40),
            "]".repeat(40)
        );
        assert!(code(p(&deep)).contains("nested deeper"));
        let big = format!(
            "---\nname: x\ndescription: y\nk: '{}'\n---\n",
            "a".repeat(70_000)
        );
        assert!(code(p(&big)).contains("larger than 65536"));
    }

    #[test]
    fn rules_are_findings() {
        let md = "---\nname: Bad--name-\ndescription: y\ncompatibility: 3\nmetadata:\n  a: b\n  n: 1\nallowed-tools: Bash(git add:*) Read\nx-extra: 1\n---\n";
        let ok = p(md).unwrap_or_else(|e| panic!("{e:?}"));
        let msgs: Vec<&str> = ok.issues.iter().map(|i| i.message.as_str()).collect();
        assert!(msgs.iter().any(|m| m.contains("only a-z")), "{msgs:?}");
        assert!(msgs.iter().any(|m| m.contains("start or end")));
        assert!(msgs.iter().any(|m| m.contains("`--`")));
        assert!(
            msgs.iter()
                .any(|m| m.contains("compatibility must be a string"))
        );
        assert!(
            msgs.iter()
                .any(|m| m.contains("metadata.n must be a string"))
        );
        assert!(
            ok.issues
                .iter()
                .any(|i| i.unknown_key && i.key == "x-extra" && i.line == 9)
        );
        assert_eq!(ok.frontmatter.allowed_tools, ["Bash(git add:*)", "Read"]);
        assert_eq!(
            ok.frontmatter.metadata.get("a").map(String::as_str),
            Some("b")
        );
        assert_eq!(ok.key_lines.get("allowed-tools"), Some(&8));
    }

    #[test]
    fn core_schema_typing() {
        for s in [
            "1", "-2", "0x1F", "0o7", "1.5", ".5", "1e3", "-.inf", ".NaN", "true", "~", "",
        ] {
            assert!(core_type(s).is_some(), "{s}");
        }
        for s in ["1.2.3", "v1", "yes", "0x", "1e", "pdf-tools", "1-2"] {
            assert!(core_type(s).is_none(), "{s}");
        }
        assert_eq!(name_violations(&"a".repeat(64)).len(), 0);
        assert_eq!(name_violations(&"a".repeat(65)).len(), 1);
    }
}
