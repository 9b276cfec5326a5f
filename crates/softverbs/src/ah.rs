//! Address handles.

use crate::pd::PdInner;
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
