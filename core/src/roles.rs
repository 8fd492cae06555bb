//! Roles and permissions (Part 3 §4.9 and §8.55, Part 5 §4.8 well-known roles; Part 18's
//! model): what a session's user may do on a node.
//!
//! * A session is granted a set of [`Roles`] when it is activated: `Anonymous` for an
//!   anonymous login, `AuthenticatedUser` for any other, plus the roles its user is given
//!   (configuration: `[[users]] roles`, see docs/Security.md).
//! * A node may carry RolePermissions ([`RolePermissions`]: a list of role → permissions),
//!   set from code or imported from a NodeSet; a namespace may carry a default list for its
//!   nodes without one. What the user may do on the node is then the union of the
//!   permissions of the roles it holds ([`RolePermissions::granted`]).
//! * A node without either follows the server's default rule ([`Roles::default_permissions`]):
//!   every user may browse, read, receive events and call; the writing roles (Operator,
//!   Engineer, Supervisor, ConfigureAdmin, SecurityAdmin) may also write.
//!
//! Leaf module: it knows node ids and the PermissionType bits, nothing of the address space.

use crate::generated::types::{PermissionType, RolePermissionType};
use crate::types::NodeId;

/// One of the well-known roles of Part 5 §4.8 (the Objects under
/// Server.ServerCapabilities.RoleSet, namespace 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum WellKnownRole {
    Anonymous = 0,
    AuthenticatedUser = 1,
    Observer = 2,
    Operator = 3,
    Engineer = 4,
    Supervisor = 5,
    ConfigureAdmin = 6,
    SecurityAdmin = 7,
}

impl WellKnownRole {
    /// Every well-known role, in bit order.
    pub const ALL: [WellKnownRole; 8] = [
        WellKnownRole::Anonymous,
        WellKnownRole::AuthenticatedUser,
        WellKnownRole::Observer,
        WellKnownRole::Operator,
        WellKnownRole::Engineer,
        WellKnownRole::Supervisor,
        WellKnownRole::ConfigureAdmin,
        WellKnownRole::SecurityAdmin,
    ];

    /// Its BrowseName (also its name in the configuration).
    pub const fn name(self) -> &'static str {
        match self {
            WellKnownRole::Anonymous => "Anonymous",
            WellKnownRole::AuthenticatedUser => "AuthenticatedUser",
            WellKnownRole::Observer => "Observer",
            WellKnownRole::Operator => "Operator",
            WellKnownRole::Engineer => "Engineer",
            WellKnownRole::Supervisor => "Supervisor",
            WellKnownRole::ConfigureAdmin => "ConfigureAdmin",
            WellKnownRole::SecurityAdmin => "SecurityAdmin",
        }
    }

    /// The role by its name (exact, as [`WellKnownRole::name`]).
    pub fn from_name(name: &str) -> Option<WellKnownRole> {
        WellKnownRole::ALL.into_iter().find(|r| r.name() == name)
    }

    /// The numeric id of its Object in namespace 0.
    pub const fn id(self) -> u32 {
        use crate::generated::node_ids as n;
        match self {
            WellKnownRole::Anonymous => n::WellKnownRole_Anonymous,
            WellKnownRole::AuthenticatedUser => n::WellKnownRole_AuthenticatedUser,
            WellKnownRole::Observer => n::WellKnownRole_Observer,
            WellKnownRole::Operator => n::WellKnownRole_Operator,
            WellKnownRole::Engineer => n::WellKnownRole_Engineer,
            WellKnownRole::Supervisor => n::WellKnownRole_Supervisor,
            WellKnownRole::ConfigureAdmin => n::WellKnownRole_ConfigureAdmin,
            WellKnownRole::SecurityAdmin => n::WellKnownRole_SecurityAdmin,
        }
    }

    /// Its NodeId.
    pub fn node_id(self) -> NodeId {
        NodeId::ns0(self.id())
    }

    /// The role whose Object this is.
    pub fn from_node_id(id: &NodeId) -> Option<WellKnownRole> {
        match (id.namespace, &id.identifier) {
            (0, crate::types::Identifier::Numeric(n)) => {
                WellKnownRole::ALL.into_iter().find(|r| r.id() == *n)
            }
            _ => None,
        }
    }

    /// The set holding this role alone.
    pub const fn set(self) -> Roles {
        Roles(1 << self as u8)
    }
}

/// A set of [`WellKnownRole`]s: the roles granted to a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Roles(u16);

impl Roles {
    /// No role.
    pub const NONE: Roles = Roles(0);
    /// A user who may read and browse (the configuration's `role = "read"`).
    pub const OBSERVER: Roles = WellKnownRole::Observer.set();
    /// A user who may also write and call (the configuration's `role = "readwrite"`).
    pub const OPERATOR: Roles = WellKnownRole::Operator.set();
    /// The roles that may write nodes without RolePermissions of their own.
    pub const WRITERS: Roles = Roles(
        WellKnownRole::Operator.set().0
            | WellKnownRole::Engineer.set().0
            | WellKnownRole::Supervisor.set().0
            | WellKnownRole::ConfigureAdmin.set().0
            | WellKnownRole::SecurityAdmin.set().0,
    );
    /// Every well-known role (the server's own reads, tests).
    pub const ALL: Roles = Roles(0xFF);

    /// Does the set hold `role`?
    pub const fn contains(self, role: WellKnownRole) -> bool {
        self.0 & (1 << role as u8) != 0
    }

    /// Both sets together.
    #[must_use]
    pub const fn with(self, other: Roles) -> Roles {
        Roles(self.0 | other.0)
    }

    /// The set with `role` added.
    #[must_use]
    pub const fn and(self, role: WellKnownRole) -> Roles {
        self.with(role.set())
    }

    /// Does the set hold any role of `other`?
    pub const fn intersects(self, other: Roles) -> bool {
        self.0 & other.0 != 0
    }

    /// May these roles write a node that has no RolePermissions (one of [`Roles::WRITERS`])?
    pub const fn may_write(self) -> bool {
        self.intersects(Roles::WRITERS)
    }

    /// The roles of the set, in bit order.
    pub fn iter(self) -> impl Iterator<Item = WellKnownRole> {
        WellKnownRole::ALL
            .into_iter()
            .filter(move |r| self.contains(*r))
    }

    /// What these roles may do on a node without RolePermissions (own or its namespace's):
    /// browse, read the value and the RolePermissions, read history, receive events and
    /// call methods (a method that changes state also needs a writing role, see
    /// `services::method`); the writing roles may also write values, attributes and history;
    /// ConfigureAdmin may also add and delete nodes and references (NodeManagement).
    pub const fn default_permissions(self) -> PermissionType {
        let read = PermissionType::Browse.0
            | PermissionType::ReadRolePermissions.0
            | PermissionType::Read.0
            | PermissionType::ReadHistory.0
            | PermissionType::ReceiveEvents.0
            | PermissionType::Call.0;
        let write = PermissionType::Write.0
            | PermissionType::WriteAttribute.0
            | PermissionType::WriteHistorizing.0
            | PermissionType::InsertHistory.0
            | PermissionType::ModifyHistory.0
            | PermissionType::DeleteHistory.0;
        // The NodeManagement services (AddNodes, DeleteNodes, AddReferences,
        // DeleteReferences): ConfigureAdmin only.
        let model = PermissionType::AddNode.0
            | PermissionType::DeleteNode.0
            | PermissionType::AddReference.0
            | PermissionType::RemoveReference.0;
        let model = if self.contains(WellKnownRole::ConfigureAdmin) {
            model
        } else {
            0
        };
        if self.may_write() {
            PermissionType(read | write | model)
        } else {
            PermissionType(read | model)
        }
    }
}

/// A node's (or a namespace's default) RolePermissions: permissions per well-known role.
/// Roles not listed get nothing on the node.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RolePermissions {
    entries: Vec<(WellKnownRole, PermissionType)>,
}

impl RolePermissions {
    /// An empty list (no role may do anything on the node).
    pub fn new() -> RolePermissions {
        RolePermissions::default()
    }

    /// Grants `permissions` to `role` (added to what it already has here).
    #[must_use]
    pub fn grant(mut self, role: WellKnownRole, permissions: PermissionType) -> RolePermissions {
        match self.entries.iter_mut().find(|(r, _)| *r == role) {
            Some((_, p)) => *p = *p | permissions,
            None => self.entries.push((role, permissions)),
        }
        self
    }

    /// The entries, in the order granted.
    pub fn entries(&self) -> &[(WellKnownRole, PermissionType)] {
        &self.entries
    }

    /// The union of the permissions of the roles in `roles`.
    pub fn granted(&self, roles: Roles) -> PermissionType {
        self.entries
            .iter()
            .filter(|(r, _)| roles.contains(*r))
            .fold(PermissionType::None, |acc, (_, p)| acc | *p)
    }

    /// The RolePermissions Attribute's value (only the entries of `roles` for
    /// UserRolePermissions, every entry with `Roles::ALL`).
    pub fn to_attribute(&self, roles: Roles) -> Vec<RolePermissionType> {
        self.entries
            .iter()
            .filter(|(r, _)| roles.contains(*r))
            .map(|(r, p)| RolePermissionType {
                role_id: r.node_id(),
                permissions: *p,
            })
            .collect()
    }

    /// From the Attribute's entries (a NodeSet's `<RolePermissions>`). An entry naming a
    /// role that is not a well-known one is an error (the server has no other roles).
    pub fn from_attribute(list: &[RolePermissionType]) -> Result<RolePermissions, NodeId> {
        let mut rp = RolePermissions::new();
        for e in list {
            let role = WellKnownRole::from_node_id(&e.role_id).ok_or_else(|| e.role_id.clone())?;
            rp = rp.grant(role, e.permissions);
        }
        Ok(rp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ids_round_trip() {
        for r in WellKnownRole::ALL {
            assert_eq!(WellKnownRole::from_name(r.name()), Some(r));
            assert_eq!(WellKnownRole::from_node_id(&r.node_id()), Some(r));
        }
        assert_eq!(WellKnownRole::Observer.id(), 15668);
        assert_eq!(WellKnownRole::Engineer.id(), 16036);
        assert_eq!(WellKnownRole::from_name("observer"), None);
    }

    #[test]
    fn defaults_follow_the_writing_roles() {
        let obs = Roles::OBSERVER.and(WellKnownRole::AuthenticatedUser);
        assert!(!obs.may_write());
        assert!(obs.default_permissions().contains(PermissionType::Read));
        assert!(!obs.default_permissions().contains(PermissionType::Write));
        let eng = WellKnownRole::Engineer.set();
        assert!(eng.may_write());
        assert!(eng.default_permissions().contains(PermissionType::Write));
        assert_eq!(Roles::ALL.iter().count(), 8);
    }

    #[test]
    fn granted_is_the_union_of_the_held_roles() {
        let rp = RolePermissions::new()
            .grant(
                WellKnownRole::Observer,
                PermissionType::Browse | PermissionType::Read,
            )
            .grant(WellKnownRole::Engineer, PermissionType::Write)
            .grant(WellKnownRole::Observer, PermissionType::ReceiveEvents);
        assert_eq!(rp.entries().len(), 2);
        let p = rp.granted(Roles::OBSERVER);
        assert!(p.contains(PermissionType::Read | PermissionType::ReceiveEvents));
        assert!(!p.contains(PermissionType::Write));
        let p = rp.granted(Roles::OBSERVER.and(WellKnownRole::Engineer));
        assert!(p.contains(PermissionType::Write | PermissionType::Read));
        // Operator is not listed: nothing, although it is a writing role.
        assert_eq!(rp.granted(Roles::OPERATOR), PermissionType::None);
        let attr = rp.to_attribute(Roles::OBSERVER);
        assert_eq!(attr.len(), 1);
        assert_eq!(
            attr.first().map(|e| e.role_id.clone()),
            Some(NodeId::ns0(15668))
        );
        assert_eq!(
            RolePermissions::from_attribute(&rp.to_attribute(Roles::ALL)),
            Ok(rp)
        );
        assert!(RolePermissions::from_attribute(&[RolePermissionType {
            role_id: NodeId::numeric(2, 7),
            permissions: PermissionType::Read,
        }])
        .is_err());
    }
}
