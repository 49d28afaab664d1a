//! What a health rule's expression may read and cost, decided when the
//! rule is loaded: CEL has no loops besides its macros' comprehensions
//! (`all`, `exists`, `exists_one`, `map`, `filter`), so the cost of an
//! expression is bounded by its size and, for each comprehension, its body
//! times the length of the list it ranges over. Objects whose lists are
//! longer than [`MAX_LIST`] are not evaluated (`eval`), which makes the
//! estimate a bound of the work one evaluation does.

use std::collections::BTreeSet;

use cel::common::ast::{EntryExpr, Expr, IdedExpr};

/// The longest list a rule ranges over: an object holding a longer list
/// anywhere is not evaluated (its workload says so).
pub const MAX_LIST: u64 = 1_000;

/// The most an expression may cost, in visited nodes: a comprehension over
/// [`MAX_LIST`] items with a body of up to about 100 nodes, or two nested
/// small ones are refused.
pub const MAX_COST: u64 = 100_000;

/// Names an expression may use besides `object` and its comprehensions'
/// variables: CEL's type names.
const TYPE_NAMES: [&str; 11] = [
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
];

/// The estimated cost of evaluating `expr` once, saturating.
pub fn estimate(expr: &IdedExpr) -> u64 {
    let children: u64 = match &expr.expr {
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => 0,
        Expr::Call(call) => call
            .target
            .iter()
            .map(|t| estimate(t))
            .chain(call.args.iter().map(estimate))
            .fold(0, u64::saturating_add),
        Expr::Comprehension(c) => {
            let body = estimate(&c.loop_cond).saturating_add(estimate(&c.loop_step));
            estimate(&c.iter_range)
                .saturating_add(estimate(&c.accu_init))
                .saturating_add(body.saturating_mul(MAX_LIST))
                .saturating_add(estimate(&c.result))
        }
        Expr::List(list) => list
            .elements
            .iter()
            .map(estimate)
            .fold(0, u64::saturating_add),
        Expr::Map(map) => entries(&map.entries)
            .map(estimate)
            .fold(0, u64::saturating_add),
        Expr::Struct(s) => entries(&s.entries)
            .map(estimate)
            .fold(0, u64::saturating_add),
        Expr::Select(select) => estimate(&select.operand),
    };
    children.saturating_add(1)
}

fn entries(entries: &[cel::common::ast::IdedEntryExpr]) -> impl Iterator<Item = &IdedExpr> {
    entries.iter().flat_map(|e| match &e.expr {
        EntryExpr::StructField(f) => vec![&f.value],
        EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
    })
}

/// The names `expr` reads that nothing in it binds (comprehension variables
/// are bound in their body), CEL's type names aside.
pub fn free_names(expr: &IdedExpr) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    collect(expr, &mut Vec::new(), &mut names);
    names
}

fn collect<'e>(expr: &'e IdedExpr, bound: &mut Vec<&'e str>, names: &mut BTreeSet<String>) {
    match &expr.expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => {
            let known = bound.contains(&name.as_str()) || TYPE_NAMES.contains(&name.as_str());
            if !known && !name.starts_with('@') {
                names.insert(name.clone());
            }
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                collect(target, bound, names);
            }
            for arg in &call.args {
                collect(arg, bound, names);
            }
        }
        Expr::Comprehension(c) => {
            collect(&c.iter_range, bound, names);
            collect(&c.accu_init, bound, names);
            let before = bound.len();
            bound.push(&c.iter_var);
            if let Some(second) = &c.iter_var2 {
                bound.push(second);
            }
            bound.push(&c.accu_var);
            collect(&c.loop_cond, bound, names);
            collect(&c.loop_step, bound, names);
            collect(&c.result, bound, names);
            bound.truncate(before);
        }
        Expr::List(list) => {
            for e in &list.elements {
                collect(e, bound, names);
            }
        }
        Expr::Map(map) => {
            for e in entries(&map.entries) {
                collect(e, bound, names);
            }
        }
        Expr::Struct(s) => {
            for e in entries(&s.entries) {
                collect(e, bound, names);
            }
        }
        Expr::Select(select) => collect(&select.operand, bound, names),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(source: &str) -> cel::Program {
        cel::Env::stdlib().compile(source).unwrap()
    }

    #[test]
    fn comprehensions_cost_their_body_per_item_and_nest() {
        // (source, the least and the most its estimate may be)
        let cases: &[(&str, u64, u64)] = &[
            ("object.status.replicas", 1, 5),
            ("1 + 2 * 3", 3, 10),
            (
                "object.spec.template.spec.containers.map(c, c.image)",
                1_000,
                20_000,
            ),
            (
                "object.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')",
                1_000,
                50_000,
            ),
            (
                "object.a.all(x, object.b.all(y, x == y))",
                MAX_COST + 1,
                u64::MAX,
            ),
        ];
        for (source, least, most) in cases {
            let got = estimate(parse(source).expression());
            assert!(
                (*least..=*most).contains(&got),
                "{source}: {got} not in {least}..={most}"
            );
        }
    }

    #[test]
    fn free_names_leave_out_bound_variables_and_type_names() {
        let cases: &[(&str, &[&str])] = &[
            ("object.status.replicas", &["object"]),
            (
                "object.spec.template.spec.containers.map(c, c.image)",
                &["object"],
            ),
            ("type(object.x) == int", &["object"]),
            ("self.status.replicas", &["self"]),
            ("object.a.exists(c, c == other)", &["object", "other"]),
            ("[1, 2].map(x, x * 2)", &[]),
        ];
        for (source, want) in cases {
            let got: Vec<String> = free_names(parse(source).expression()).into_iter().collect();
            assert_eq!(got, *want, "{source}");
        }
    }
}
