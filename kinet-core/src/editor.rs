//! Editors that serve a run's file reads and terminals (the Agent Client
//! Protocol's client side does): the [`Editor`] a host puts in a
//! context's extensions, its files and terminals.

pub use crate::ctx::{
    Editor, EditorFiles, EditorTerminal, EditorTerminals, TerminalCommand, TerminalExit, Terminals,
};
