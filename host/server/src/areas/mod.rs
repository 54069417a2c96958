//! The areas of the interface, one module each: its wire shapes (requests
//! and answers), the function each operation runs (read the request into
//! the use case's, call `anchor_app`, render the result), its route table
//! and its handlers. REST (`http/`, which assembles the route tables) and
//! MCP (`mcp/`, which calls the same functions) are the two transports over
//! them; the plumbing below (`listener`, `body`, `extract`, `wire`, …)
//! names no area.
//!
//! A new area is one module of `anchor_app` and one module here.

pub mod account;
pub mod agents;
pub mod ara;
pub mod asa;
pub mod bilateral;
pub mod declarations;
pub mod discovery;
pub mod dur;
pub mod earned;
pub mod ise;
pub mod owners;
pub mod payment_status;
pub mod pricing;
pub mod reports;
pub mod retention;
pub mod scitt;
pub mod sdac;
pub mod tools;
pub mod transparency;
pub mod tsl;

use axum::http::Method;

use crate::openapi::Operation;

/// Every operation of the API, in reading order.
pub fn operations() -> Vec<Operation> {
    let mut all = Vec::new();
    all.extend(agents::operations());
    all.extend(ara::operations());
    all.extend(dur::operations());
    all.extend(earned::operations());
    all.extend(tsl::operations());
    all.extend(tools::operations());
    all.extend(ise::operations());
    all.extend(sdac::operations());
    all.extend(retention::operations());
    all.extend(asa::operations());
    all.extend(declarations::operations());
    all.extend(bilateral::operations());
    all.extend(payment_status::operations());
    all.extend(pricing::operations());
    all.extend(account::operations());
    all.extend(transparency::operations());
    all.extend(scitt::operations());
    all.extend(discovery::operations());
    all.extend(owners::operations());
    all
}

/// Whether this server implements `route` (its route table has it).
pub fn implements(route: &anchor_app::charge::Route) -> bool {
    static TABLE: std::sync::OnceLock<Vec<(Method, &'static str)>> = std::sync::OnceLock::new();
    TABLE
        .get_or_init(|| operations().into_iter().map(|o| (o.method, o.path)).collect())
        .iter()
        .any(|(method, path)| method.as_str() == route.method && *path == route.path)
}

#[cfg(test)]
mod tests {
    /// Every paid route of the interface's catalog is served here, so what
    /// the catalog says (Trial's routes in trial status, the x402 document)
    /// never names a route this server does not have.
    #[test]
    fn every_catalog_route_is_implemented() {
        for paid in anchor_app::catalog::PAID_ROUTES {
            assert!(super::implements(&paid.route), "{} is in the catalog and not in the route table", paid.route);
        }
        assert!(!super::implements(&anchor_app::charge::Route { method: "POST", path: "/v1/no/such/route" }));
    }
}
