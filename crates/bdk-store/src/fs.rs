//! placeholder
/// The file-system store.
pub struct FsStore;
