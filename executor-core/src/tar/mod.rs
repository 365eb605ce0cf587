//! Tar streaming shared by every backend.
//!
//! [`pack_dir`] turns a host folder into a tar byte stream without ever
//! holding the archive in memory; [`unpack_untrusted`] writes a tar stream
//! that came from an environment into a host folder, refusing anything that
//! could escape it.

mod audit;
mod compress;
mod pack;
mod unpack;

pub use audit::links_leaving;
pub use compress::{
    gunzip, gunzip_if_gzipped, least_round_trip, unpack_untrusted_gzipped_or_not, Compression,
    AUTO_ROUND_TRIP, ROUND_TRIP_SAMPLES,
};

pub use pack::{pack_contents, pack_dir, pack_folders, PackStream, PackedFolder};
pub use unpack::{
    unpack_untrusted, RefusedEntry, UnpackError, UnpackLimits, UnpackSummary, MAX_EXTENSION_BYTES,
};
