//! Names of classes and functions, resolved through the Profiling API and metadata once per id
//! and cached. Never called from hot paths or signal handlers.
//!
//! Metadata is read in place from each module's loaded image ([`crate::image_metadata`]); the
//! runtime's `IMetaDataImport` is used only for modules without an image (dynamic, collectible),
//! for tokens the image does not hold (metadata updates applied at run time), or everywhere
//! with `CLRPROF_METADATA=importer`.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use clrprof_sys::{ClassID, FunctionID, MetaDataImport, MethodProps, ModuleID, ProfilerInfo};

use crate::image_metadata::Metadata;

use crate::signature::{self, alias, apply_type_args, TypeNames};

/// What a function is called and where it lives.
#[derive(Clone, Debug, Default)]
pub(crate) struct FunctionNames {
    pub(crate) class: ClassID,
    pub(crate) module: ModuleID,
    pub(crate) token: u32,
    pub(crate) name: String,
    pub(crate) class_name: String,
    pub(crate) signature: String,
}

/// Per module and metadata token.
type TokenMap<T> = RwLock<HashMap<(ModuleID, u32), T>>;

/// The metadata of one module: its tables read in place from its loaded image, and the
/// runtime's importer, opened only when the image cannot answer.
pub(crate) struct ModuleMetadata {
    info: ProfilerInfo,
    module: ModuleID,
    image: Option<Metadata<'static>>,
    importer: OnceLock<Option<MetaDataImport>>,
}

impl ModuleMetadata {
    fn open(info: ProfilerInfo, module: ModuleID, use_image: bool) -> ModuleMetadata {
        let image = if use_image { Self::image_tables(info, module) } else { None };
        if use_image && image.is_none() {
            crate::log_info!(
                "module 0x{module:x}: no metadata tables in an image; names through the runtime's metadata importer"
            );
        }
        ModuleMetadata { info, module, image, importer: OnceLock::new() }
    }

    /// The module's metadata tables in its loaded image: `None` for modules without an image
    /// (dynamic) and for collectible ones (their image goes at unload, possibly while a name is
    /// being read).
    fn image_tables(info: ProfilerInfo, module: ModuleID) -> Option<Metadata<'static>> {
        use clrprof_sys::consts::module_flags::{COLLECTIBLE, DYNAMIC, FLAT_LAYOUT};
        let (base, flags) = info.get_module_image(module).ok()?;
        if base == 0 || flags & (DYNAMIC | COLLECTIBLE) != 0 {
            return None;
        }
        // Safety: a loaded, non-collectible module's image stays mapped for the process's life,
        // and `metadata_of_image` reads only the ranges its headers give (see the function).
        let read = |at: usize, len: usize| unsafe { clrprof_sys::info::module_image_bytes(base, at, len) };
        Metadata::parse(crate::image_metadata::metadata_of_image(read, flags & FLAT_LAYOUT != 0)?)
    }

    /// The static, non-literal fields of the module's non-generic types whose name `wanted`
    /// accepts, as (TypeDef, FieldDef, name); `None` when the module has no image tables to read.
    pub(crate) fn static_fields(&self, wanted: impl Fn(&str) -> bool) -> Option<Vec<(u32, u32, String)>> {
        self.image.as_ref()?.static_fields(wanted)
    }

    /// The module's tables read from its image, when it has one.
    pub(crate) fn image(&self) -> Option<&Metadata<'static>> {
        self.image.as_ref()
    }

    fn importer(&self) -> Option<&MetaDataImport> {
        self.importer.get_or_init(|| self.info.get_module_metadata(self.module).ok().flatten()).as_ref()
    }

    /// `Namespace.Name` of a TypeDef.
    fn type_def_name(&self, td: u32) -> Option<String> {
        self.image
            .as_ref()
            .and_then(|m| m.type_def_name(td))
            .or_else(|| self.importer()?.get_type_def_props(td).ok().map(|p| p.0))
    }

    /// (`Namespace.Name`, resolution scope) of a TypeRef.
    fn type_ref(&self, tr: u32) -> Option<(String, u32)> {
        self.image.as_ref().and_then(|m| m.type_ref(tr)).or_else(|| self.importer()?.get_type_ref_props(tr).ok())
    }

    fn method_props(&self, mb: u32) -> Option<MethodProps> {
        let from_image = self
            .image
            .as_ref()
            .and_then(|m| m.method(mb))
            .map(|(class, name, attributes, sig)| MethodProps { class, name, attributes, signature: sig.to_vec() });
        from_image.or_else(|| self.importer()?.get_method_props(mb).ok())
    }

    /// The enclosing type of a nested TypeDef, `None` when it is not nested.
    fn enclosing_type(&self, td: u32) -> Option<u32> {
        match self.image.as_ref().and_then(|m| m.enclosing_type(td)) {
            Some(known) => known,
            None => self.importer()?.get_nested_class_props(td),
        }
    }

    fn type_spec(&self, ts: u32) -> Option<Vec<u8>> {
        let from_image = self.image.as_ref().and_then(|m| m.type_spec(ts)).map(<[u8]>::to_vec);
        from_image.or_else(|| self.importer()?.get_type_spec_from_token(ts).ok())
    }

    fn generic_param_names(&self, owner: u32) -> Vec<String> {
        if let Some(names) = self.image.as_ref().and_then(|m| m.generic_param_names(owner)) {
            return names;
        }
        self.importer().map(|md| md.generic_param_names(owner)).unwrap_or_default()
    }
}

pub(crate) struct Names {
    info: ProfilerInfo,
    /// Read names from modules' images (`CLRPROF_METADATA=image`, the default).
    use_image: bool,
    modules: RwLock<HashMap<ModuleID, Arc<ModuleMetadata>>>,
    classes: RwLock<HashMap<ClassID, Arc<str>>>,
    /// Names of a module's TypeDef and TypeRef tokens: the types of signatures, classes and
    /// declaring types recur across many functions and classes, and each name takes several
    /// metadata calls.
    tokens: TokenMap<Arc<str>>,
    /// Generic parameter names of a module's TypeDefs (shared by all methods of the type).
    params: TokenMap<Arc<[String]>>,
}

const ELEMENT_NAMES: &[(u32, &str)] = &[
    (0x02, "bool"),
    (0x03, "char"),
    (0x04, "sbyte"),
    (0x05, "byte"),
    (0x06, "short"),
    (0x07, "ushort"),
    (0x08, "int"),
    (0x09, "uint"),
    (0x0a, "long"),
    (0x0b, "ulong"),
    (0x0c, "float"),
    (0x0d, "double"),
    (0x0e, "string"),
    (0x18, "nint"),
    (0x19, "nuint"),
    (0x1c, "object"),
];

impl Names {
    pub(crate) fn new(info: ProfilerInfo, use_image: bool) -> Names {
        Names {
            info,
            use_image,
            modules: RwLock::new(HashMap::new()),
            classes: RwLock::new(HashMap::new()),
            tokens: RwLock::new(HashMap::new()),
            params: RwLock::new(HashMap::new()),
        }
    }

    /// The cached metadata of a module.
    pub(crate) fn module_metadata(&self, module: ModuleID) -> Option<Arc<ModuleMetadata>> {
        if let Some(m) = self.modules.read().ok()?.get(&module) {
            return Some(Arc::clone(m));
        }
        let md = Arc::new(ModuleMetadata::open(self.info, module, self.use_image));
        let mut w = self.modules.write().ok()?;
        Some(Arc::clone(w.entry(module).or_insert(md)))
    }

    /// Releases the module's metadata (and its importer, if one was opened) and forgets its token
    /// names (module unload: the id may be reused by another module).
    pub(crate) fn forget_module(&self, module: ModuleID) {
        if let Ok(mut w) = self.modules.write() {
            w.remove(&module);
        }
        if let Ok(mut w) = self.tokens.write() {
            w.retain(|k, _| k.0 != module);
        }
        if let Ok(mut w) = self.params.write() {
            w.retain(|k, _| k.0 != module);
        }
    }

    /// The name of a TypeDef (`0x02…`) or TypeRef (`0x01…`) token of `module`, cached.
    fn type_token_name(&self, module: ModuleID, md: &ModuleMetadata, token: u32) -> Arc<str> {
        if let Some(n) = self.tokens.read().ok().and_then(|m| m.get(&(module, token)).cloned()) {
            return n;
        }
        let name: Arc<str> = if token >> 24 == 0x01 {
            Self::typeref_name(md, token).into()
        } else {
            Self::typedef_name(md, token).into()
        };
        if let Ok(mut w) = self.tokens.write() {
            w.insert((module, token), Arc::clone(&name));
        }
        name
    }

    /// Generic parameter names of a TypeDef of `module`, cached.
    fn typedef_params(&self, module: ModuleID, md: &ModuleMetadata, typedef: u32) -> Arc<[String]> {
        if let Some(p) = self.params.read().ok().and_then(|m| m.get(&(module, typedef)).cloned()) {
            return p;
        }
        let p: Arc<[String]> = md.generic_param_names(typedef).into();
        if let Ok(mut w) = self.params.write() {
            w.insert((module, typedef), Arc::clone(&p));
        }
        p
    }

    pub(crate) fn forget_class(&self, class: ClassID) {
        if let Ok(mut w) = self.classes.write() {
            w.remove(&class);
        }
    }

    /// `Namespace.Outer+Inner` of a TypeDef (arity suffixes kept; callers strip them).
    fn typedef_name(md: &ModuleMetadata, td: u32) -> String {
        let mut parts = Vec::new();
        let mut cur = td;
        for _ in 0..16 {
            let name = md.type_def_name(cur).unwrap_or_else(|| format!("<typedef 0x{cur:08x}>"));
            parts.push(name);
            match md.enclosing_type(cur) {
                Some(enc) => cur = enc,
                None => break,
            }
        }
        parts.reverse();
        parts.join("+")
    }

    /// `Namespace.Outer+Inner` of a TypeRef (nested refs resolved through their scope).
    fn typeref_name(md: &ModuleMetadata, tr: u32) -> String {
        let mut parts = Vec::new();
        let mut cur = tr;
        for _ in 0..16 {
            match md.type_ref(cur) {
                Some((name, scope)) => {
                    parts.push(name);
                    if scope >> 24 == 0x01 {
                        cur = scope;
                        continue;
                    }
                }
                None => parts.push(format!("<typeref 0x{cur:08x}>")),
            }
            break;
        }
        parts.reverse();
        parts.join("+")
    }

    /// Display name of a loaded class: `Ns.Type<int, string>`, `int[]`, `Ns.Outer+Inner`.
    pub(crate) fn class_name(&self, class: ClassID) -> Arc<str> {
        if let Some(n) = self.classes.read().ok().and_then(|m| m.get(&class).cloned()) {
            return n;
        }
        let name: Arc<str> = self.compute_class_name(class, 0).into();
        if let Ok(mut w) = self.classes.write() {
            w.insert(class, Arc::clone(&name));
        }
        name
    }

    fn compute_class_name(&self, class: ClassID, depth: u32) -> String {
        if class == 0 {
            return "<unknown class>".into();
        }
        if depth > 8 {
            return "...".into();
        }
        match self.info.get_class_id_info2(class) {
            Ok((module, td, _parent, args)) => {
                let base = match self.module_metadata(module) {
                    Some(md) => self.type_token_name(module, &md, td).to_string(),
                    None => format!("<class 0x{td:08x}>"),
                };
                let a: Vec<String> = args.iter().map(|&c| self.type_arg_name(c, depth + 1)).collect();
                apply_type_args(&base, &a)
            }
            Err(_) => match self.info.is_array_class(class) {
                Ok(Some((elem, base, rank))) => {
                    let e = if base != 0 {
                        self.type_arg_name(base, depth + 1)
                    } else {
                        ELEMENT_NAMES
                            .iter()
                            .find(|(c, _)| *c == elem)
                            .map(|(_, n)| n.to_string())
                            .unwrap_or_else(|| "?".into())
                    };
                    format!("{e}[{}]", ",".repeat(rank.saturating_sub(1) as usize))
                }
                _ => "<composite class>".into(),
            },
        }
    }

    fn type_arg_name(&self, class: ClassID, depth: u32) -> String {
        let n = self.compute_class_name(class, depth);
        match n.as_str() {
            "System.__Canon" => "__Canon".into(),
            other => alias(other).to_string(),
        }
    }

    /// The name of a method definition, generic parameters as declared:
    /// `Ns.Type<T>.Method<U>` (what every instantiation of it shares).
    pub(crate) fn method_def_name(&self, module: ModuleID, token: u32) -> Option<String> {
        let md = self.module_metadata(module)?;
        let props = md.method_props(token)?;
        let class_params = self.typedef_params(module, &md, props.class);
        let method_params = md.generic_param_names(token);
        let class = if (props.class & 0x00ff_ffff) > 1 {
            apply_type_args(&self.type_token_name(module, &md, props.class), &class_params)
        } else {
            String::new()
        };
        let m =
            if method_params.is_empty() { props.name } else { format!("{}<{}>", props.name, method_params.join(", ")) };
        Some(if class.is_empty() { m } else { format!("{class}.{m}") })
    }

    /// Names of a function: `Ns.Type<args>.Method<margs>`, its class, and its signature.
    pub(crate) fn function(&self, id: FunctionID) -> FunctionNames {
        let mut f = FunctionNames::default();
        // A method without metadata (DynamicMethod, compiled expression, IL stub): its token and
        // class mean nothing; the runtime knows the name it was given.
        if self.info.is_function_dynamic(id).unwrap_or(false) {
            let (module, name) = self.info.get_dynamic_function_info(id).unwrap_or_default();
            f.module = module;
            f.name = dynamic_name(&name);
            return f;
        }
        let (class, module, token, margs) = match self.info.get_function_info2(id) {
            Ok(v) => v,
            Err(_) => {
                f.name = format!("<function 0x{id:x}>");
                return f;
            }
        };
        f.class = class;
        f.module = module;
        f.token = token;
        let Some(md) = self.module_metadata(module) else {
            f.name = format!("<method 0x{token:08x}>");
            return f;
        };
        let props = md.method_props(token);
        let method_name = props.as_ref().map(|p| p.name.clone()).unwrap_or_else(|| format!("<method 0x{token:08x}>"));
        let typedef = props.as_ref().map(|p| p.class).unwrap_or(0);
        let class_params = if typedef != 0 { self.typedef_params(module, &md, typedef) } else { Arc::from([]) };
        let method_params = md.generic_param_names(token);
        f.class_name = if class != 0 {
            self.class_name(class).to_string()
        } else if typedef != 0 && (typedef & 0x00ff_ffff) != 1 {
            apply_type_args(&self.type_token_name(module, &md, typedef), &class_params)
        } else {
            String::new()
        };
        let margs_s = if !margs.is_empty() {
            let a: Vec<String> = margs.iter().map(|&c| self.type_arg_name(c, 0)).collect();
            format!("<{}>", a.join(", "))
        } else if !method_params.is_empty() {
            format!("<{}>", method_params.join(", "))
        } else {
            String::new()
        };
        f.name = if f.class_name.is_empty() {
            format!("{method_name}{margs_s}")
        } else {
            format!("{}.{method_name}{margs_s}", f.class_name)
        };
        if let Some(p) = props {
            let resolver =
                SigNames { names: self, module, md: &md, class_params: &class_params, method_params: &method_params };
            f.signature = signature::format_method_sig(&p.signature, &resolver)
                .unwrap_or_else(|| "<unreadable signature>".into());
        }
        f
    }
}

/// The display name of a dynamic method: `[dynamic] Name` (the `DynamicMethod`'s name as given;
/// `[dynamic] <unnamed>` when the runtime gives none).
pub(crate) fn dynamic_name(name: &str) -> String {
    let name = name.trim();
    if name.is_empty() {
        "[dynamic] <unnamed>".into()
    } else {
        format!("[dynamic] {name}")
    }
}

struct SigNames<'a> {
    names: &'a Names,
    module: ModuleID,
    md: &'a ModuleMetadata,
    class_params: &'a [String],
    method_params: &'a [String],
}

impl TypeNames for SigNames<'_> {
    fn token_name(&self, token: u32) -> String {
        match token >> 24 {
            0x01 | 0x02 => self.names.type_token_name(self.module, self.md, token).to_string(),
            0x1b => self
                .md
                .type_spec(token)
                .and_then(|b| signature::format_type_spec(&b, self))
                .unwrap_or_else(|| format!("<typespec 0x{token:08x}>")),
            _ => format!("<token 0x{token:08x}>"),
        }
    }

    fn type_param(&self, index: u32) -> String {
        self.class_params.get(index as usize).cloned().unwrap_or_else(|| format!("!{index}"))
    }

    fn method_param(&self, index: u32) -> String {
        self.method_params.get(index as usize).cloned().unwrap_or_else(|| format!("!!{index}"))
    }
}
