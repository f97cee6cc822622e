//! Credentials, and who a request comes from (RFC 0012).
//!
//! This crate owns the cluster's PKI ([`pki`]: a CA, the serving certificate, the admin's client
//! certificate and the ServiceAccount signing key, generated once and kept as 0600 files), the
//! TLS server configuration built from upstream's flags with certificates reloaded when their
//! files change ([`tls`]), the user a verified client certificate names ([`user`]), and
//! authentication in upstream's order ([`authn`]: client certificate, static token file,
//! anonymous), the impersonation headers read into users and checks ([`impersonation`]), the headers a router names its user in to a shard ([`front_proxy`]), and RBAC's decision over a snapshot of the RBAC objects with upstream's
//! bootstrap policy ([`rbac`]).
//!
//! It never serves HTTP, routes a request or reads the store: the HTTP surface carries a
//! connection's verified certificates to the request, and the router follows the RBAC objects
//! and asks [`rbac::Policy`] about each request.

pub mod authn;
pub mod front_proxy;
pub mod impersonation;
pub mod pki;
pub mod rbac;
pub mod service_accounts;
pub mod tls;
pub mod user;
