//! The top of the crate: the whole application, state, middleware and routes. It names no
//! feature crate: the binary passes the console in as `mount`.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::from_fn;
use actix_web::web;
use utoipa_actix_web::AppExt as _;

use crate::state::AppState;

/// What the binary mounts beside the API (the console's routes), under the same state and
/// middleware.
pub type Mount = fn(&mut web::ServiceConfig);

/// The whole application: the state, the request middleware, the API ([`crate::api::api`]),
/// whatever `mount` registers, the operational endpoints, and the 404/405 envelope for
/// everything else.
pub fn app(
    state: AppState,
    mount: Mount,
) -> actix_web::App<
    impl actix_web::dev::ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    actix_web::App::new()
        .app_data(web::Data::new(state))
        .wrap(from_fn(crate::middleware::request_context))
        .into_utoipa_app()
        .configure(crate::api::api)
        .into_app()
        .configure(mount)
        .configure(crate::e2b::configure)
        .configure(crate::ops::configure)
        .default_service(web::to(crate::middleware::not_found))
}
