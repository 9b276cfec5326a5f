//! Address handles.

use crate::error::{logged, Error};
use crate::pd::{PdInner, ProtectionDomain};
use proto::engine::AhHandle;
use proto::AhAttr;
use std::sync::Arc;

/// An address handle (`struct ibv_ah`): where a UD send goes.
pub struct AddressHandle {
    pd: Arc<PdInner>,
    h: AhHandle,
    attr: AhAttr,
}

impl AddressHandle {
    pub(crate) fn new(pd: Arc<PdInner>, h: AhHandle, attr: AhAttr) -> Self {
        AddressHandle { pd, h, attr }
    }

    pub(crate) fn handle(&self) -> AhHandle {
        self.h
    }

    /// The address vector.
    pub fn attr(&self) -> &AhAttr {
        &self.attr
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        let _ = self.pd.with(|e| e.destroy_ah(self.h));
    }
}

impl std::fmt::Debug for AddressHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressHandle")
            .field("attr", &self.attr)
            .finish()
    }
}

impl ProtectionDomain {
    /// `ibv_create_ah`: the address vector must carry a GRH (RoCE).
    pub fn create_ah(&self, attr: &AhAttr) -> Result<AddressHandle, Error> {
        let h = logged(
            "create_ah",
            self.inner.with(|e| e.create_ah(self.inner.h, attr)),
        )?;
        Ok(AddressHandle::new(self.inner.clone(), h, *attr))
    }
}
