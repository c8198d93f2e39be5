//! `--include` / `--exclude` patterns: `*` wildcards, matched against a function's full name
//! (`Ns.Type.Method`), its type, a namespace or type prefix, and its assembly's name.

#[derive(Clone, Debug, Default)]
pub(crate) struct Filter {
    include: Vec<String>,
    exclude: Vec<String>,
}

/// Glob match with `*` (any run of characters), case-sensitive.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let (mut star, mut mark) = (usize::MAX, 0usize);
    while ti < t.len() {
        if pi < p.len() && p[pi] != '*' && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = pi;
            mark = ti;
            pi += 1;
        } else if star != usize::MAX {
            pi = star + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

fn pattern_matches(p: &str, name: &str, class: &str, assembly: &str) -> bool {
    glob(p, name)
        || glob(p, class)
        || glob(&format!("{p}.*"), name)
        || glob(&format!("{p}+*"), name)
        || (!assembly.is_empty() && glob(p, assembly))
}

impl Filter {
    pub(crate) fn new(include: &[String], exclude: &[String]) -> Filter {
        let clean = |v: &[String]| v.iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
        Filter { include: clean(include), exclude: clean(exclude) }
    }

    /// True when every function gets hooks (no include, no exclude): nothing to match, so callers
    /// need not resolve names first.
    pub(crate) fn takes_all(&self) -> bool {
        self.include.is_empty() && self.exclude.is_empty()
    }

    /// True when the function gets hooks: it matches an include (or there are none) and no exclude.
    pub(crate) fn matches(&self, name: &str, class: &str, assembly: &str) -> bool {
        let inc = self.include.is_empty() || self.include.iter().any(|p| pattern_matches(p, name, class, assembly));
        inc && !self.exclude.iter().any(|p| pattern_matches(p, name, class, assembly))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("Demo.*", "Demo.Program.Main"));
        assert!(glob("*Main", "Demo.Program.Main"));
        assert!(glob("*.Pri*.Count", "Demo.Primes.Count"));
        assert!(!glob("Demo.*", "System.String.Concat"));
        assert!(glob("*", ""));
        assert!(!glob("a", ""));
    }

    #[test]
    fn filters_by_namespace_type_method_and_assembly() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(Filter::new(&[], &s(&[" "])).takes_all(), "blank patterns are none");
        let f = Filter::new(&s(&["Demo"]), &s(&["Demo.Primes"]));
        assert!(!f.takes_all());
        assert!(f.matches("Demo.Pricing.Totals", "Demo.Pricing", "Demo"));
        assert!(!f.matches("Demo.Primes.Count", "Demo.Primes", "Demo"), "excluded type");
        assert!(!f.matches("System.String.Concat", "System.String", "System.Private.CoreLib"));
        let f = Filter::new(&s(&["System.Private.CoreLib"]), &[]);
        assert!(f.matches("System.String.Concat", "System.String", "System.Private.CoreLib"), "assembly");
        let f = Filter::new(&[], &s(&["System.*", "Microsoft.*"]));
        assert!(f.matches("Demo.Program.Main", "Demo.Program", "Demo"));
        assert!(!f.matches("System.Linq.Enumerable.Select", "System.Linq.Enumerable", "System.Linq"));
        let f = Filter::new(&s(&["*.Fib"]), &[]);
        assert!(f.matches("Calls.Recursion.Fib", "Calls.Recursion", "Calls"));
        let f = Filter::new(&s(&["Outer+Inner"]), &[]);
        assert!(!f.matches("Ns.Outer+Inner.M", "Ns.Outer+Inner", "A"), "patterns anchor at the start");
        let f = Filter::new(&s(&["Ns.Outer"]), &[]);
        assert!(f.matches("Ns.Outer+Inner.M", "Ns.Outer+Inner", "A"), "nested types of a type");
    }
}
