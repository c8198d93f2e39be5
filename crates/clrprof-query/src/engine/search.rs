//! Search over function names: a case-insensitive substring or a regular expression, as the
//! viewer's hot spots, flame graphs and diff table filter and mark functions.

use crate::{QueryError, Result};

/// Substring (case-insensitive) or regular-expression search.
pub struct Matcher {
    text: Option<String>,
    re: Option<regex::Regex>,
}

impl Matcher {
    pub fn new(search: Option<&str>, regex: bool) -> Result<Matcher> {
        let s = search.filter(|s| !s.is_empty());
        match (s, regex) {
            (None, _) => Ok(Matcher { text: None, re: None }),
            (Some(s), true) => {
                let re = regex::RegexBuilder::new(s).size_limit(1 << 20).build().map_err(|e| {
                    QueryError::Unsupported(format!("bad regular expression: {}", one_line(&e.to_string())))
                })?;
                Ok(Matcher { text: None, re: Some(re) })
            }
            (Some(s), false) => Ok(Matcher { text: Some(s.to_lowercase()), re: None }),
        }
    }

    pub fn active(&self) -> bool {
        self.text.is_some() || self.re.is_some()
    }

    pub fn matches(&self, name: &str) -> bool {
        match (&self.text, &self.re) {
            (Some(t), _) => name.to_lowercase().contains(t.as_str()),
            (_, Some(r)) => r.is_match(name),
            _ => true,
        }
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
