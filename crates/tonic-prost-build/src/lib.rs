//! A protoc-free `tonic-prost-build` (RFC 0009).
//!
//! **Owns:** turning `.proto` files into prost messages and tonic clients and servers at build
//! time without a `protoc` binary. The workspace patches crates.io's `tonic-prost-build` with this
//! crate, so etcd-client's build script (which compiles etcd's `.proto` files for the storage
//! crate's client and, with `build-server`, for the embedded store's server) runs here: protox, a
//! protobuf compiler written in Rust, parses the files into a `FileDescriptorSet`; prost-build
//! generates the messages from it; tonic-build's `CodeGenBuilder` generates the services, exactly
//! as upstream's crate does once it has a descriptor set.
//!
//! **Must never:** run a `protoc` executable, read `PROTOC`, or grow options no build script in
//! the dependency graph calls: the surface is the part of upstream's `Builder` that etcd-client
//! uses (`configure`, `build_client`, `build_server`, `build_transport`, `out_dir`,
//! `compile_protos`) plus `compile_fds`. A dependency that needs more fails to compile, which
//! says where to extend it.

use std::io;
use std::path::{Path, PathBuf};

use proc_macro2::TokenStream;
use prost_build::{Method, Service};

/// The codec every generated service uses, as upstream's default.
const CODEC_PATH: &str = "tonic_prost::ProstCodec";

/// Where generated services find the message types: the package module that holds them.
const PROTO_PATH: &str = "super";

/// Starts a configuration with upstream's defaults: client, server and transport code.
pub fn configure() -> Builder {
    Builder { build_client: true, build_server: true, build_transport: true, out_dir: None }
}

/// Compiles one `.proto` file whose imports resolve in its own directory, with the defaults.
pub fn compile_protos(proto: impl AsRef<Path>) -> io::Result<()> {
    let proto = proto.as_ref();
    let dir = proto.parent().ok_or_else(|| io::Error::other("a .proto file has no directory"))?;
    configure().compile_protos(&[proto], &[dir])
}

/// What to generate and where; see [`configure`].
#[derive(Debug, Clone)]
pub struct Builder {
    build_client: bool,
    build_server: bool,
    build_transport: bool,
    out_dir: Option<PathBuf>,
}

impl Builder {
    /// Generate the client side of each service (default on).
    pub fn build_client(mut self, enable: bool) -> Self {
        self.build_client = enable;
        self
    }

    /// Generate the server side of each service (default on).
    pub fn build_server(mut self, enable: bool) -> Self {
        self.build_server = enable;
        self
    }

    /// Generate the clients' `connect` helpers over tonic's transport (default on).
    pub fn build_transport(mut self, enable: bool) -> Self {
        self.build_transport = enable;
        self
    }

    /// Write the generated files here instead of `OUT_DIR`.
    pub fn out_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.out_dir = Some(dir.as_ref().to_owned());
        self
    }

    /// Parses `protos` (imports resolved against `includes`, then protox's bundled well-known
    /// types) and generates their code. Parse errors come back as `io::Error`s that name the file
    /// and line, as protoc's would.
    pub fn compile_protos<P: AsRef<Path>>(self, protos: &[P], includes: &[P]) -> io::Result<()> {
        for dir in includes {
            // A build script reruns when the files it compiled change, as with upstream's crate.
            if std::env::var_os("CARGO").is_some() {
                println!("cargo:rerun-if-changed={}", dir.as_ref().display());
            }
        }
        let fds = protox::compile(protos, includes).map_err(|e| io::Error::other(format!("{e:?}")))?;
        self.compile_fds(fds)
    }

    /// Generates the code of an already parsed descriptor set.
    pub fn compile_fds(self, fds: prost_types::FileDescriptorSet) -> io::Result<()> {
        let out_dir = match self.out_dir {
            Some(dir) => dir,
            None => std::env::var_os("OUT_DIR")
                .map(PathBuf::from)
                .ok_or_else(|| io::Error::other("OUT_DIR is not set: call out_dir() outside a build script"))?,
        };
        let mut config = prost_build::Config::new();
        config.out_dir(out_dir);
        // Generated code is not ours to lint, as upstream's crate also says.
        config.type_attribute(".", "#[allow(clippy::all)]");
        if self.build_client || self.build_server {
            config.service_generator(Box::new(Services {
                client: self.build_client,
                server: self.build_server,
                transport: self.build_transport,
            }));
        }
        config.compile_fds(fds)
    }
}

/// Generates tonic code for each service prost-build finds.
struct Services {
    client: bool,
    server: bool,
    transport: bool,
}

impl prost_build::ServiceGenerator for Services {
    fn generate(&mut self, service: Service, buf: &mut String) {
        let service = TonicService::from(service);
        let mut codegen = tonic_build::CodeGenBuilder::new();
        codegen.emit_package(true).build_transport(self.transport);
        let mut tokens = TokenStream::new();
        if self.client {
            tokens.extend(codegen.generate_client(&service, PROTO_PATH));
        }
        if self.server {
            tokens.extend(codegen.generate_server(&service, PROTO_PATH));
        }
        // tonic-build only emits what parses; a failure here is a bug in it, and a build script
        // has no way to report one but to stop.
        let file = syn::parse2(tokens).expect("tonic-build generated code that does not parse");
        buf.push_str(&prettyplease::unparse(&file));
    }
}

/// A prost service as tonic-build's `Service` trait sees it.
struct TonicService {
    service: Service,
    methods: Vec<TonicMethod>,
}

impl From<Service> for TonicService {
    fn from(service: Service) -> Self {
        let methods = service.methods.iter().cloned().map(TonicMethod).collect();
        TonicService { service, methods }
    }
}

impl tonic_build::Service for TonicService {
    type Method = TonicMethod;
    type Comment = String;

    fn name(&self) -> &str {
        &self.service.name
    }
    fn package(&self) -> &str {
        &self.service.package
    }
    fn identifier(&self) -> &str {
        &self.service.proto_name
    }
    fn methods(&self) -> &[TonicMethod] {
        &self.methods
    }
    fn comment(&self) -> &[String] {
        &self.service.comments.leading
    }
}

/// A prost method as tonic-build's `Method` trait sees it.
struct TonicMethod(Method);

impl tonic_build::Method for TonicMethod {
    type Comment = String;

    fn name(&self) -> &str {
        &self.0.name
    }
    fn identifier(&self) -> &str {
        &self.0.proto_name
    }
    fn codec_path(&self) -> &str {
        CODEC_PATH
    }
    fn client_streaming(&self) -> bool {
        self.0.client_streaming
    }
    fn server_streaming(&self) -> bool {
        self.0.server_streaming
    }
    fn comment(&self) -> &[String] {
        &self.0.comments.leading
    }
    fn deprecated(&self) -> bool {
        self.0.options.deprecated()
    }
    fn request_response_name(&self, proto_path: &str, _well_known: bool) -> (TokenStream, TokenStream) {
        (rust_type(&self.0.input_type, proto_path), rust_type(&self.0.output_type, proto_path))
    }
}

/// The path of a method's message type as seen from the generated service module.
///
/// prost-build resolves message types to Rust paths relative to the package module (`RangeRequest`,
/// `super::mvccpb::KeyValue`), to absolute paths for extern types (`::prost_types::Any`), and to
/// `()` for `google.protobuf.Empty`; the service module sits one level below the package module.
fn rust_type(ty: &str, proto_path: &str) -> TokenStream {
    let path = if ty == "()" || ty.starts_with("::") || ty.starts_with("crate::") {
        ty.to_owned()
    } else if let Some(name) = ty.strip_prefix(".google.protobuf.") {
        if name == "Empty" { "()".to_owned() } else { format!("::prost_types::{name}") }
    } else {
        format!("{proto_path}::{ty}")
    };
    path.parse().expect("a Rust type path")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROTO: &str = r#"
syntax = "proto3";
package demo;
import "google/protobuf/empty.proto";
import "other.proto";
message Ping { string text = 1; other.Tag tag = 2; }
service Echo {
  rpc Say(Ping) returns (Ping);
  rpc Listen(stream Ping) returns (stream other.Tag);
  rpc Nothing(google.protobuf.Empty) returns (google.protobuf.Empty);
}
"#;

    fn generate(builder: Builder) -> String {
        let dir = std::env::temp_dir().join(format!("tonic-prost-build-test-{}-{}", std::process::id(), rand_suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("demo.proto"), PROTO).unwrap();
        std::fs::write(dir.join("other.proto"), "syntax = \"proto3\";\npackage other;\nmessage Tag { int64 id = 1; }\n").unwrap();
        builder.out_dir(&dir).compile_protos(&[dir.join("demo.proto")], std::slice::from_ref(&dir)).unwrap();
        let code = std::fs::read_to_string(dir.join("demo.rs")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        code
    }

    fn rand_suffix() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        N.fetch_add(1, Ordering::Relaxed)
    }

    #[test]
    fn generates_messages_clients_and_servers_without_protoc() {
        let code = generate(configure());
        assert!(code.contains("pub struct Ping"), "{code}");
        assert!(code.contains("pub mod echo_client"), "{code}");
        assert!(code.contains("pub mod echo_server"), "{code}");
        assert!(code.contains("\"/demo.Echo/Say\""), "{code}");
        // Types of another package resolve through the package module, Empty becomes ().
        assert!(code.contains("super::super::other::Tag"), "{code}");
        assert!(code.contains("tonic::IntoRequest<()>"), "{code}");
        assert!(code.contains("tonic_prost::ProstCodec"), "{code}");
        assert!(code.contains("pub async fn connect"), "{code}");
    }

    #[test]
    fn builder_switches_sides_and_transport() {
        let code = generate(configure().build_server(false).build_transport(false));
        assert!(code.contains("pub mod echo_client"));
        assert!(!code.contains("pub mod echo_server"));
        assert!(!code.contains("pub async fn connect"));
        let code = generate(configure().build_client(false));
        assert!(!code.contains("pub mod echo_client"));
        assert!(code.contains("pub mod echo_server"));
    }

    #[test]
    fn a_syntax_error_names_the_file() {
        let dir = std::env::temp_dir().join(format!("tonic-prost-build-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("bad.proto"), "syntax = \"proto3\";\nmessage { }\n").unwrap();
        let err = configure().out_dir(&dir).compile_protos(&[dir.join("bad.proto")], std::slice::from_ref(&dir)).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(err.to_string().contains("bad.proto"), "{err}");
    }
}
