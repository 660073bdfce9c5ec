//! Attribute macros of `weir-sdk`: `#[stage]` and `#[filter]`.
//!
//! Each keeps the user's function unchanged and adds a hidden `Stage` implementation plus the
//! component exports (only when compiling for `wasm32`). A signature the SDK cannot call is a
//! compile error pointing at the offending part.
#![deny(missing_docs)]

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{parse_macro_input, FnArg, ItemFn, Path, ReturnType, Type};

/// Marks `fn(&Message) -> Outcome` (or `fn(&Message, &State) -> Outcome` with
/// `#[stage(init = make_state)]`, where `make_state: fn(&Config) -> Result<State, String>`)
/// as the component's stage.
#[proc_macro_attribute]
pub fn stage(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Stage)
}

/// Marks `fn(&Message) -> bool` (or `fn(&Message, &State) -> bool` with
/// `#[filter(init = make_state)]`) as the component's stage: `true` keeps the message, `false`
/// filters it out.
#[proc_macro_attribute]
pub fn filter(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Filter)
}

#[derive(Clone, Copy)]
enum Kind {
    Stage,
    Filter,
}

fn expand(attr: TokenStream, item: TokenStream, kind: Kind) -> TokenStream {
    let func = parse_macro_input!(item as ItemFn);
    let init = match parse_init(attr.into()) {
        Ok(i) => i,
        Err(e) => {
            let err = e.to_compile_error();
            return quote!(#func #err).into();
        }
    };
    match generate(&func, init.as_ref(), kind) {
        Ok(extra) => quote!(#func #extra).into(),
        Err(e) => {
            let err = e.to_compile_error();
            quote!(#func #err).into()
        }
    }
}

/// Parses `init = path` (or nothing).
fn parse_init(attr: TokenStream2) -> syn::Result<Option<Path>> {
    if attr.is_empty() {
        return Ok(None);
    }
    let mut init = None;
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("init") {
            init = Some(meta.value()?.parse::<Path>()?);
            Ok(())
        } else {
            Err(meta.error("unknown argument: expected `init = path::to::function`"))
        }
    });
    syn::parse::Parser::parse2(parser, attr)?;
    Ok(init)
}

fn reference_type(arg: &FnArg, what: &str) -> syn::Result<Type> {
    match arg {
        FnArg::Receiver(r) => Err(syn::Error::new(
            r.span(),
            "a stage function cannot take `self`",
        )),
        FnArg::Typed(t) => match &*t.ty {
            Type::Reference(r) if r.mutability.is_none() => Ok((*r.elem).clone()),
            other => Err(syn::Error::new(
                other.span(),
                format!("expected a shared reference: `&{what}`"),
            )),
        },
    }
}

fn generate(func: &ItemFn, init: Option<&Path>, kind: Kind) -> syn::Result<TokenStream2> {
    let sig = &func.sig;
    if let Some(a) = &sig.asyncness {
        return Err(syn::Error::new(
            a.span(),
            "a stage function cannot be `async`",
        ));
    }
    if !sig.generics.params.is_empty() {
        return Err(syn::Error::new(
            sig.generics.span(),
            "a stage function cannot be generic",
        ));
    }
    if let ReturnType::Default = sig.output {
        let want = match kind {
            Kind::Stage => "`-> weir_sdk::Outcome`",
            Kind::Filter => "`-> bool`",
        };
        return Err(syn::Error::new(
            sig.paren_token.span.close(),
            format!("missing return type: expected {want}"),
        ));
    }
    let args: Vec<&FnArg> = sig.inputs.iter().collect();
    let name = &sig.ident;
    let holder = format_ident!("__WeirStage_{}", name);
    let call_result = |call: TokenStream2| match kind {
        Kind::Stage => quote!(::weir_sdk::Outcome::from(#call)),
        Kind::Filter => quote!(::weir_sdk::Outcome::from(::core::convert::identity::<bool>(#call))),
    };
    let body = match (args.as_slice(), init) {
        ([msg], None) => {
            reference_type(msg, "weir_sdk::Message<'_>")?;
            let call = call_result(quote!(#name(msg)));
            quote! {
                #[doc(hidden)]
                #[allow(non_camel_case_types)]
                struct #holder;
                impl ::weir_sdk::Stage for #holder {
                    fn init(_config: &::weir_sdk::Config) -> ::core::result::Result<Self, ::std::string::String> {
                        ::core::result::Result::Ok(#holder)
                    }
                    fn process(&self, msg: &::weir_sdk::Message<'_>) -> ::weir_sdk::Outcome {
                        #call
                    }
                }
            }
        }
        ([msg, state], init) => {
            reference_type(msg, "weir_sdk::Message<'_>")?;
            let state_ty = reference_type(state, "State")?;
            let call = call_result(quote!(#name(msg, &self.0)));
            let make = match init {
                Some(path) => quote_spanned!(path.span()=> #path(config)),
                None => {
                    // Without `init`, the second argument is the raw config.
                    quote!(::core::result::Result::<_, ::std::string::String>::Ok(
                        config.clone()
                    ))
                }
            };
            quote! {
                #[doc(hidden)]
                #[allow(non_camel_case_types)]
                struct #holder(#state_ty);
                impl ::weir_sdk::Stage for #holder {
                    fn init(config: &::weir_sdk::Config) -> ::core::result::Result<Self, ::std::string::String> {
                        let state: ::core::result::Result<#state_ty, ::std::string::String> = #make;
                        state.map(#holder)
                    }
                    fn process(&self, msg: &::weir_sdk::Message<'_>) -> ::weir_sdk::Outcome {
                        #call
                    }
                }
            }
        }
        ([_], Some(path)) => {
            return Err(syn::Error::new(
                path.span(),
                "with `init = ...` the function takes a second argument: `state: &State`",
            ))
        }
        _ => {
            let span = if args.is_empty() {
                sig.paren_token.span.join()
            } else {
                sig.inputs.span()
            };
            return Err(syn::Error::new(
                span,
                "expected `fn(msg: &weir_sdk::Message<'_>) -> ...` or `fn(msg: &Message<'_>, state: &State) -> ...`",
            ));
        }
    };
    Ok(quote! {
        #body
        ::weir_sdk::export_stage!(#holder);
    })
}
