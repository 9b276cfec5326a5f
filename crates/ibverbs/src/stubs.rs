//! The `IBVERBS_PRIVATE_34` interface between libibverbs and its provider
//! drivers. Provider libraries that programs link (perftest links libmlx5
//! and libefa) import these and must find them when they load; they are never
//! reached for a softverbs device (its `ibv_device` is no provider's), except
//! the driver registration their constructors run. So: registration is a
//! no-op, the rest answer `EOPNOTSUPP` (or NULL) and say why.

use crate::util::*;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::AtomicBool;

/// `verbs_allow_disassociate_destroy`: a `bool` providers read.
#[no_mangle]
pub static verbs_allow_disassociate_destroy: AtomicBool = AtomicBool::new(false);

/// Called by provider constructors at program start: nothing to register.
#[no_mangle]
pub extern "C" fn verbs_register_driver_34(_ops: *const c_void) {}

/// The provider log function (variadic in C; the arguments after `fmt` are
/// not read). Reached by provider error paths, e.g. "not an EFA device".
#[no_mangle]
pub extern "C" fn __verbs_log(_ctx: *mut c_void, _level: u32, _fmt: *const c_char) {}

const WHY: &str = "a provider-driver entry point; softverbs devices have no kernel driver";

macro_rules! driver_int {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            refuse(stringify!($name), EOPNOTSUPP, WHY)
        }
    )*};
}

macro_rules! driver_ptr {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> *mut c_void {
            set_errno(refuse(stringify!($name), EOPNOTSUPP, WHY));
            std::ptr::null_mut()
        }
    )*};
}

driver_ptr!(_verbs_init_and_alloc_context, verbs_open_device,);

driver_int!(
    __ioctl_final_num_attrs,
    execute_ioctl,
    ibv_cmd_advise_mr,
    ibv_cmd_alloc_dm,
    ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast,
    ibv_cmd_close_xrcd,
    ibv_cmd_create_ah,
    ibv_cmd_create_counters,
    ibv_cmd_create_cq,
    ibv_cmd_create_cq_ex,
    ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp,
    ibv_cmd_create_qp_ex,
    ibv_cmd_create_qp_ex2,
    ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex,
    ibv_cmd_create_wq,
    ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr,
    ibv_cmd_destroy_ah,
    ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow,
    ibv_cmd_destroy_flow_action,
    ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table,
    ibv_cmd_destroy_srq,
    ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast,
    ibv_cmd_free_dm,
    ibv_cmd_get_context,
    ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp,
    ibv_cmd_modify_qp,
    ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq,
    ibv_cmd_modify_wq,
    ibv_cmd_open_qp,
    ibv_cmd_open_xrcd,
    ibv_cmd_poll_cq,
    ibv_cmd_post_recv,
    ibv_cmd_post_send,
    ibv_cmd_post_srq_recv,
    ibv_cmd_query_context,
    ibv_cmd_query_device_any,
    ibv_cmd_query_mr,
    ibv_cmd_query_port,
    ibv_cmd_query_qp,
    ibv_cmd_query_srq,
    ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr,
    ibv_cmd_reg_mr,
    ibv_cmd_req_notify_cq,
    ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
    ibv_read_ibdev_sysfs_file,
    verbs_init_cq,
    verbs_set_ops,
    verbs_uninit_context,
);

crate::symver!("stubs");
