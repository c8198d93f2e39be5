//! The plain-text table renderer of every text view: a header row and aligned columns. Not a view
//! itself (`--view tables` is `gcp_tables.rs`).

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

pub struct TextTable {
    headers: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
}

impl TextTable {
    pub fn new(headers: &[(&str, Align)]) -> Self {
        TextTable { headers: headers.iter().map(|(h, a)| (h.to_string(), *a)).collect(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn render(&self) -> String {
        let n = self.headers.len();
        let mut w: Vec<usize> = self.headers.iter().map(|(h, _)| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |cells: Vec<&str>| {
            let mut s = String::from(" ");
            for (i, c) in cells.iter().enumerate() {
                let pad = w[i].saturating_sub(c.chars().count());
                let last = i + 1 == n;
                s.push(' ');
                match self.headers[i].1 {
                    Align::Right => {
                        s.push_str(&" ".repeat(pad));
                        s.push_str(c);
                    }
                    Align::Left => {
                        s.push_str(c);
                        if !last {
                            s.push_str(&" ".repeat(pad));
                        }
                    }
                }
                if !last {
                    s.push(' ');
                }
            }
            s.truncate(s.trim_end().len());
            s.push('\n');
            s
        };
        let mut out = line(self.headers.iter().map(|(h, _)| h.as_str()).collect());
        for r in &self.rows {
            let mut cells: Vec<&str> = r.iter().map(|s| s.as_str()).collect();
            cells.resize(n, "");
            out += &line(cells);
        }
        out
    }
}
