//! The GitHub REST client.
