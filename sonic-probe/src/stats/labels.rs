//! Bounded values for the `comm` label.
//!
//! Every distinct process name becomes a label value, and every label value
//! multiplies the series of each metric. The first `max` names seen keep
//! their own label for the daemon's lifetime (so series never change name);
//! later names are exported as `comm="other"`. Memory is bounded by `max`.

use std::{collections::HashSet, sync::Arc};

/// Label of names beyond the limit, and of calls counted in the overflow
/// entries of a full kernel map.
pub const OTHER: &str = "other";

#[derive(Debug)]
pub struct CommLabels {
    max: usize,
    known: HashSet<Arc<str>>,
    other: Arc<str>,
    folded: u64,
}

impl CommLabels {
    pub fn new(max: usize) -> Self {
        CommLabels { max, known: HashSet::new(), other: Arc::from(OTHER), folded: 0 }
    }

    /// The label for a process name (empty: the overflow entry, "other").
    pub fn label(&mut self, comm: &str) -> Arc<str> {
        if comm.is_empty() {
            return self.other.clone();
        }
        if let Some(k) = self.known.get(comm) {
            return k.clone();
        }
        if self.known.len() < self.max {
            let k: Arc<str> = Arc::from(comm);
            self.known.insert(k.clone());
            return k;
        }
        self.folded += 1;
        self.other.clone()
    }

    /// Names that have their own label.
    pub fn assigned(&self) -> usize {
        self.known.len()
    }

    /// Lookups answered with "other" because the limit was reached.
    pub fn folded_lookups(&self) -> u64 {
        self.folded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_beyond_the_limit_fold_into_other() {
        let mut l = CommLabels::new(2);
        assert_eq!(&*l.label("python3"), "python3");
        assert_eq!(&*l.label("dd"), "dd");
        assert_eq!(&*l.label("cat"), OTHER);
        // Known names keep their label; the order of arrival decides.
        assert_eq!(&*l.label("python3"), "python3");
        assert_eq!(&*l.label("cat"), OTHER);
        assert_eq!(l.assigned(), 2);
        assert_eq!(l.folded_lookups(), 2);
    }

    #[test]
    fn empty_name_is_other_and_takes_no_slot() {
        let mut l = CommLabels::new(1);
        assert_eq!(&*l.label(""), OTHER);
        assert_eq!(&*l.label("x"), "x");
        assert_eq!(l.assigned(), 1);
    }
}
