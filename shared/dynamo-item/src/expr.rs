//! Updates that read like their rule: an [`Update`] of one item says what it sets, removes and
//! adds, and [`Cond`] when it may happen, in attribute names and values; rendering makes the
//! expressions, every `#name` and `:value` placeholder, and records the serving request's id
//! (`request_id` set, or removed when there is none) as one more action of the update.
//!
//! ```ignore
//! Update::of(task_key(link, task))
//!     .set("status", s("claimed"))
//!     .set("claim_id", s(claim_id.to_string()))
//!     .when(eq("owner", s(owner)).and(gt("expires_at", n(now))).and(
//!         eq("status", s("queued")).or(eq("status", s("claimed")).and(le("lease_until", n(now)))),
//!     ))
//! ```

use std::collections::{BTreeSet, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;

use crate::{Item, REQUEST_ID_ATTR, s};

/// A condition on the item's attributes (DynamoDB's condition expressions).
#[derive(Debug, Clone)]
pub enum Cond {
    /// `#attr <op> :value`.
    Compare(&'static str, &'static str, AttributeValue),
    /// `#attr IN (:a, :b, …)`.
    In(&'static str, Vec<AttributeValue>),
    /// `attribute_exists(#attr)`.
    Exists(&'static str),
    /// `attribute_not_exists(#attr)`.
    Missing(&'static str),
    /// Every one of them.
    All(Vec<Cond>),
    /// At least one of them.
    Any(Vec<Cond>),
}

/// `attr = value`.
pub fn eq(attr: &'static str, value: AttributeValue) -> Cond {
    Cond::Compare(attr, "=", value)
}
/// `attr <> value`.
pub fn ne(attr: &'static str, value: AttributeValue) -> Cond {
    Cond::Compare(attr, "<>", value)
}
/// `attr <= value`.
pub fn le(attr: &'static str, value: AttributeValue) -> Cond {
    Cond::Compare(attr, "<=", value)
}
/// `attr < value`.
pub fn lt(attr: &'static str, value: AttributeValue) -> Cond {
    Cond::Compare(attr, "<", value)
}
/// `attr > value`.
pub fn gt(attr: &'static str, value: AttributeValue) -> Cond {
    Cond::Compare(attr, ">", value)
}
/// `attr` is one of `values`.
pub fn is_in(attr: &'static str, values: Vec<AttributeValue>) -> Cond {
    Cond::In(attr, values)
}
/// The item has `attr` (with `"pk"`: the item exists).
pub fn exists(attr: &'static str) -> Cond {
    Cond::Exists(attr)
}
/// The item lacks `attr` (with `"pk"`: there is no such item).
pub fn missing(attr: &'static str) -> Cond {
    Cond::Missing(attr)
}

impl Cond {
    /// Both this and `other`.
    pub fn and(self, other: Cond) -> Cond {
        match self {
            Cond::All(mut v) => {
                v.push(other);
                Cond::All(v)
            }
            c => Cond::All(vec![c, other]),
        }
    }

    /// This or `other`.
    pub fn or(self, other: Cond) -> Cond {
        match self {
            Cond::Any(mut v) => {
                v.push(other);
                Cond::Any(v)
            }
            c => Cond::Any(vec![c, other]),
        }
    }

    fn render(&self, p: &mut Placeholders) -> String {
        let group = |c: &Cond, p: &mut Placeholders| match c {
            Cond::All(_) | Cond::Any(_) => format!("({})", c.render(p)),
            _ => c.render(p),
        };
        match self {
            Cond::Compare(a, op, v) => format!("{} {op} {}", p.name(a), p.value(v.clone())),
            Cond::In(a, vs) => {
                let list: Vec<String> = vs.iter().map(|v| p.value(v.clone())).collect();
                format!("{} IN ({})", p.name(a), list.join(", "))
            }
            Cond::Exists(a) => format!("attribute_exists({})", p.name(a)),
            Cond::Missing(a) => format!("attribute_not_exists({})", p.name(a)),
            Cond::All(cs) => cs.iter().map(|c| group(c, p)).collect::<Vec<_>>().join(" AND "),
            Cond::Any(cs) => cs.iter().map(|c| group(c, p)).collect::<Vec<_>>().join(" OR "),
        }
    }
}

/// How a `SET` action sets its attribute.
#[derive(Debug, Clone)]
enum Set {
    To(AttributeValue),
    /// `if_not_exists(#a, :v)`: keeps a value already there.
    IfAbsent(AttributeValue),
    /// `if_not_exists(#a, :start) + :by`.
    Increment {
        start: AttributeValue,
        by: AttributeValue,
    },
    /// `#a.#entry = :v`: one entry of a map attribute (the entry's name is data, so it gets a
    /// generated placeholder).
    Entry(String, AttributeValue),
}

/// One item's update: what it sets, removes and adds, and when it may happen.
#[derive(Debug, Clone)]
pub struct Update {
    /// The item's key.
    pub key: Item,
    set: Vec<(&'static str, Set)>,
    remove: Vec<&'static str>,
    add: Vec<(&'static str, AttributeValue)>,
    when: Option<Cond>,
}

/// An update as DynamoDB takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The update expression.
    pub update: String,
    /// The condition expression, if any.
    pub condition: Option<String>,
    /// Every `#name` placeholder's attribute.
    pub names: HashMap<String, String>,
    /// `None` when the expressions use no value (DynamoDB refuses an empty map).
    pub values: Option<Item>,
}

impl Update {
    /// An update of the item at `key`.
    pub fn of(key: Item) -> Self {
        Self { key, set: Vec::new(), remove: Vec::new(), add: Vec::new(), when: None }
    }

    /// `attr = value`.
    pub fn set(mut self, attr: &'static str, value: AttributeValue) -> Self {
        self.set.push((attr, Set::To(value)));
        self
    }

    /// `attr = value` unless the item has it already.
    pub fn set_if_absent(mut self, attr: &'static str, value: AttributeValue) -> Self {
        self.set.push((attr, Set::IfAbsent(value)));
        self
    }

    /// `attr = (attr, or start when absent) + by`.
    pub fn increment(mut self, attr: &'static str, start: AttributeValue, by: AttributeValue) -> Self {
        self.set.push((attr, Set::Increment { start, by }));
        self
    }

    /// `attr[entry] = value` in the map `attr` (which must exist: say so in the condition).
    pub fn set_entry(mut self, attr: &'static str, entry: String, value: AttributeValue) -> Self {
        self.set.push((attr, Set::Entry(entry, value)));
        self
    }

    /// Removes `attr`.
    pub fn remove(mut self, attr: &'static str) -> Self {
        self.remove.push(attr);
        self
    }

    /// Adds `value` to the number `attr` (0 when absent).
    pub fn add(mut self, attr: &'static str, value: AttributeValue) -> Self {
        self.add.push((attr, value));
        self
    }

    /// Only when `cond` holds (and any condition given before).
    pub fn when(mut self, cond: Cond) -> Self {
        self.when = Some(match self.when.take() {
            None => cond,
            Some(c) => c.and(cond),
        });
        self
    }

    /// The expressions, with the serving request's id recorded (`request_id`).
    pub fn render(&self, request_id: Option<&str>) -> Rendered {
        let mut p = Placeholders::default();
        let mut sets: Vec<String> = Vec::new();
        let mut removes: Vec<String> = Vec::new();
        match request_id {
            Some(id) => sets.push(format!("{} = {}", p.name(REQUEST_ID_ATTR), p.value(s(id)))),
            None => removes.push(p.name(REQUEST_ID_ATTR)),
        }
        for (a, how) in &self.set {
            let name = p.name(a);
            sets.push(match how {
                Set::To(v) => format!("{name} = {}", p.value(v.clone())),
                Set::IfAbsent(v) => format!("{name} = if_not_exists({name}, {})", p.value(v.clone())),
                Set::Increment { start, by } => {
                    format!("{name} = if_not_exists({name}, {}) + {}", p.value(start.clone()), p.value(by.clone()))
                }
                Set::Entry(entry, v) => format!("{name}.{} = {}", p.entry(entry), p.value(v.clone())),
            });
        }
        removes.extend(self.remove.iter().map(|a| p.name(a)));
        let adds: Vec<String> = self.add.iter().map(|(a, v)| format!("{} {}", p.name(a), p.value(v.clone()))).collect();
        let mut clauses = Vec::new();
        for (word, list) in [("SET", &sets), ("REMOVE", &removes), ("ADD", &adds)] {
            if !list.is_empty() {
                clauses.push(format!("{word} {}", list.join(", ")));
            }
        }
        let condition = self.when.as_ref().map(|c| c.render(&mut p));
        Rendered {
            update: clauses.join(" "),
            condition,
            names: p
                .names
                .iter()
                .map(|n| (format!("#{n}"), n.clone()))
                .chain(p.entries.iter().enumerate().map(|(i, e)| (format!("#e{i}"), e.clone())))
                .collect(),
            values: Some(p.values).filter(|v| !v.is_empty()),
        }
    }
}

#[derive(Default)]
struct Placeholders {
    names: BTreeSet<String>,
    /// Names that are data (a map's entries), by their generated placeholder.
    entries: Vec<String>,
    values: Item,
}

impl Placeholders {
    fn name(&mut self, attr: &str) -> String {
        self.names.insert(attr.to_owned());
        format!("#{attr}")
    }

    fn entry(&mut self, entry: &str) -> String {
        self.entries.push(entry.to_owned());
        format!("#e{}", self.entries.len() - 1)
    }

    fn value(&mut self, v: AttributeValue) -> String {
        let key = format!(":v{}", self.values.len());
        self.values.insert(key.clone(), v);
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{n, s};

    fn key(pk: String, sk: impl Into<String>) -> Item {
        crate::values([("pk", s(pk)), ("sk", s(sk.into()))])
    }

    #[test]
    fn an_update_renders_its_rule_with_every_placeholder() {
        let u = Update::of(key("P".into(), "S"))
            .set("status", s("claimed"))
            .increment("count", n(0), n(1))
            .remove("gsi2pk")
            .when(
                eq("owner", s("o"))
                    .and(gt("expires_at", n(5)))
                    .and(eq("status", s("queued")).or(eq("status", s("claimed")).and(le("lease_until", n(5))))),
            );
        let r = u.render(Some("req-1"));
        assert_eq!(
            r.update,
            "SET #request_id = :v0, #status = :v1, #count = if_not_exists(#count, :v2) + :v3 REMOVE #gsi2pk"
        );
        assert_eq!(
            r.condition.as_deref(),
            Some("#owner = :v4 AND #expires_at > :v5 AND (#status = :v6 OR (#status = :v7 AND #lease_until <= :v8))")
        );
        assert_eq!(r.values.as_ref().map(HashMap::len), Some(9));
        assert_eq!(r.names.len(), 7, "{:?}", r.names);
        assert_eq!(r.values.unwrap()[":v0"], s("req-1"));
    }

    #[test]
    fn without_a_request_its_id_is_removed_and_an_update_may_have_no_condition() {
        let r = Update::of(key("P".into(), "S")).add("count", n(1)).render(None);
        assert_eq!((r.update.as_str(), r.condition), ("REMOVE #request_id ADD #count :v0", None));
        let r = Update::of(key("P".into(), "S")).remove("a").when(is_in("s", vec![s("x"), s("y")])).render(None);
        assert_eq!((r.update.as_str(), r.condition.as_deref()), ("REMOVE #request_id, #a", Some("#s IN (:v0, :v1)")));
        assert_eq!(r.values.map(|v| v.len()), Some(2));
        let r = Update::of(key("P".into(), "S")).set_entry("m", "gs_1#2".into(), n(7)).render(None);
        assert_eq!(r.update, "SET #m.#e0 = :v0 REMOVE #request_id");
        assert_eq!(r.names.get("#e0").map(String::as_str), Some("gs_1#2"), "an entry's name is data");
        let r = Update::of(key("P".into(), "S")).set("a", n(1)).when(exists("pk").and(missing("b").or(lt("c", n(2)))));
        assert_eq!(
            r.render(None).condition.as_deref(),
            Some("attribute_exists(#pk) AND (attribute_not_exists(#b) OR #c < :v1)")
        );
    }
}
