//! Errors of compiling a chain segment.

#[derive(Debug, thiserror::Error)]
pub enum JitError {
    #[error("a segment needs at least one element")]
    EmptySegment,
    #[error("element `{0}` has unbound parameters and cannot be compiled")]
    NotRunnable(String),
    #[error("code generation: {0}")]
    Module(Box<cranelift_module::ModuleError>),
    #[error("the target `{0}` is not supported: {1}")]
    Target(String, String),
    #[error("Cranelift settings: {0}")]
    Settings(#[from] cranelift_codegen::settings::SetError),
    #[error("the verifier rejected `{function}`: {errors}")]
    Verifier { function: String, errors: String },
    #[error("host function {0:?} could not be declared in the module (a bug in the JIT)")]
    MissingHostFn(weft_hostcalls::abi::HostFn),
    #[error("`init` of `{0}` failed: {1}")]
    Init(String, String),
    #[error("writing the object: {0}")]
    Object(String),
    #[error("linked code: {0}")]
    Linked(String),
}

impl From<cranelift_module::ModuleError> for JitError {
    fn from(e: cranelift_module::ModuleError) -> Self {
        JitError::Module(Box::new(e))
    }
}
