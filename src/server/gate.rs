//! Which connections the webhook holds, so that clients that never finish a
//! TLS handshake — or finish it and never send a request — cannot crowd out
//! the apiserver.
//!
//! A client holding sockets open costs nothing, while each one costs the
//! server a slot. Waiting for slots (a semaphore in front of `accept`) lets
//! such a client keep admission down for as long as the handshake timeout,
//! over and over. So the listener never waits: a new connection always gets
//! a slot, and when one is needed a connection that has not yet shown itself
//! to be a client is closed — the oldest one of the peer address holding the
//! most, so a flood from some addresses closes its own connections and not
//! the apiserver's:
//! - pending TLS handshakes have a cap (`--max-pending-handshakes`) and a
//!   cap per peer address (`--max-pending-per-peer`); at the peer's cap its
//!   own oldest goes;
//! - established connections have a cap (`--max-connections`); at it a
//!   connection that has not sent a whole request goes. When every
//!   established connection has been served, the newcomer is the one
//!   closed: those are clients, and they keep their connections.
//!
//! A peer's connections are evicted oldest first, so even a flood from the
//! apiserver's own address (a shared NAT) closes a young handshake only when
//! more than a cap's worth of connections arrive while it is that young.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

pub use crate::metrics::Eviction;

/// The caps.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub pending: usize,
    pub per_peer: usize,
    pub established: usize,
}

/// The connections held, by phase.
#[derive(Debug)]
pub struct Gate {
    limits: Limits,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    /// Connections whose TLS handshake has not finished.
    pending: Pool,
    /// Established connections that have not been served yet.
    unserved: Pool,
    /// Established connections, served or not.
    established: usize,
}

/// Connections of one phase, by peer, each peer's oldest first.
#[derive(Debug, Default)]
struct Pool {
    slots: HashMap<u64, oneshot::Sender<Eviction>>,
    peers: HashMap<IpAddr, VecDeque<u64>>,
    /// Each peer as (connections, its oldest's age rank, peer): the last is
    /// the peer holding the most, the one with the oldest among equals.
    sizes: BTreeSet<(usize, Reverse<u64>, IpAddr)>,
}

impl Pool {
    fn len(&self) -> usize {
        self.slots.len()
    }

    fn key(&self, peer: IpAddr) -> Option<(usize, Reverse<u64>, IpAddr)> {
        let ids = self.peers.get(&peer)?;
        Some((ids.len(), Reverse(*ids.front()?), peer))
    }

    /// Runs `change` on `peer`'s queue, keeping `sizes` in step.
    fn change(&mut self, peer: IpAddr, change: impl FnOnce(&mut VecDeque<u64>)) {
        if let Some(key) = self.key(peer) {
            self.sizes.remove(&key);
        }
        let ids = self.peers.entry(peer).or_default();
        change(ids);
        if ids.is_empty() {
            self.peers.remove(&peer);
        }
        if let Some(key) = self.key(peer) {
            self.sizes.insert(key);
        }
    }

    fn insert(&mut self, id: u64, peer: IpAddr, evict: oneshot::Sender<Eviction>) {
        self.slots.insert(id, evict);
        self.change(peer, |ids| ids.push_back(id));
    }

    /// Takes `id` out (whoever ends, moves or evicts it), with its sender.
    fn take(&mut self, id: u64, peer: IpAddr) -> Option<oneshot::Sender<Eviction>> {
        let evict = self.slots.remove(&id)?;
        self.change(peer, |ids| {
            // Ends mostly come in opening order: near the front.
            if let Some(at) = ids.iter().position(|&x| x == id) {
                ids.remove(at);
            }
        });
        Some(evict)
    }

    fn remove(&mut self, id: u64, peer: IpAddr) {
        self.take(id, peer);
    }

    fn peer_len(&self, peer: IpAddr) -> usize {
        self.peers.get(&peer).map_or(0, VecDeque::len)
    }

    /// Closes `peer`'s oldest connection in this pool.
    fn evict_oldest_of(&mut self, peer: IpAddr, why: Eviction) -> bool {
        let Some(&id) = self.peers.get(&peer).and_then(VecDeque::front) else {
            return false;
        };
        match self.take(id, peer) {
            Some(evict) => {
                // The connection's task may already be ending: then nobody
                // listens, and its slot is free all the same.
                let _ = evict.send(why);
                true
            }
            None => false,
        }
    }

    /// Closes the oldest connection of the peer holding the most.
    fn evict_from_the_largest(&mut self, why: Eviction) -> bool {
        match self.sizes.last() {
            Some(&(_, _, peer)) => self.evict_oldest_of(peer, why),
            None => false,
        }
    }
}

/// One connection's place in the [`Gate`]; leaving it (drop) frees it.
#[derive(Debug)]
pub struct Ticket {
    gate: Arc<Gate>,
    id: u64,
    peer: IpAddr,
    phase: Phase,
    /// Fires when the gate closes this connection to make room.
    pub evicted: oneshot::Receiver<Eviction>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Pending,
    Established,
    /// Refused a place among the established.
    Gone,
}

impl Gate {
    pub fn new(limits: Limits) -> Arc<Self> {
        let at_least_one = |n: usize| n.max(1);
        Arc::new(Self {
            limits: Limits {
                pending: at_least_one(limits.pending),
                per_peer: at_least_one(limits.per_peer),
                established: at_least_one(limits.established),
            },
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The critical sections do not panic; a poisoned lock still holds
        // consistent books.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for a connection from `peer` that is about to handshake,
    /// made by evicting a pending handshake if a cap is reached.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Ticket {
        let peer = peer.to_canonical();
        let (evict, evicted) = oneshot::channel();
        let mut inner = self.lock();
        let id = inner.next;
        inner.next += 1;
        if inner.pending.peer_len(peer) >= self.limits.per_peer {
            inner.pending.evict_oldest_of(peer, Eviction::Peer);
        } else if inner.pending.len() >= self.limits.pending {
            inner.pending.evict_from_the_largest(Eviction::Pending);
        }
        inner.pending.insert(id, peer, evict);
        drop(inner);
        Ticket {
            gate: self.clone(),
            id,
            peer,
            phase: Phase::Pending,
            evicted,
        }
    }

    /// Connection `id` has sent a whole request: it is a client, and is no
    /// longer evicted to make room. Its eviction channel closes.
    pub fn served(&self, id: u64, peer: IpAddr) {
        self.lock().unserved.remove(id, peer.to_canonical());
    }

    /// Connections in each phase: (pending handshakes, established).
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.pending.len(), inner.established)
    }
}

impl Ticket {
    /// The handshake finished: the connection moves to the established,
    /// evicting an unserved one at the cap. `Err` when every established
    /// connection has been served: this one is to be closed.
    pub fn established(&mut self) -> Result<(), Eviction> {
        if self.phase != Phase::Pending {
            return Err(Eviction::Full);
        }
        let (evict, evicted) = oneshot::channel();
        let gate = self.gate.clone();
        let mut inner = gate.lock();
        inner.pending.remove(self.id, self.peer);
        // The evicted one's ticket counts it until its task ends.
        if inner.established >= gate.limits.established
            && !inner.unserved.evict_from_the_largest(Eviction::Unserved)
        {
            self.phase = Phase::Gone;
            return Err(Eviction::Full);
        }
        inner.established += 1;
        inner.unserved.insert(self.id, self.peer, evict);
        self.evicted = evicted;
        self.phase = Phase::Established;
        Ok(())
    }

    /// What [`Gate::served`] takes: the connection's serving task holds the
    /// ticket, its request handler these.
    pub fn key(&self) -> (u64, IpAddr) {
        (self.id, self.peer)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut inner = self.gate.lock();
        match self.phase {
            // Absent when evicted: its slot went then.
            Phase::Pending => inner.pending.remove(self.id, self.peer),
            Phase::Established => {
                inner.unserved.remove(self.id, self.peer);
                inner.established -= 1;
            }
            Phase::Gone => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn gate(pending: usize, per_peer: usize, established: usize) -> Arc<Gate> {
        Gate::new(Limits {
            pending,
            per_peer,
            established,
        })
    }

    fn evicted(tickets: &mut [Ticket]) -> Vec<Option<Eviction>> {
        tickets.iter_mut().map(|t| t.evicted.try_recv().ok()).collect()
    }

    #[test]
    fn at_the_pending_cap_the_largest_peers_oldest_handshake_goes() {
        let g = gate(4, 10, 10);
        let mut t = vec![g.admit(ip(1)), g.admit(ip(2)), g.admit(ip(2)), g.admit(ip(3))];
        t.push(g.admit(ip(4)));
        // 10.0.0.2 holds two: its oldest goes, not 10.0.0.1's older one.
        assert_eq!(evicted(&mut t), [None, Some(Eviction::Pending), None, None, None]);
        assert_eq!(g.counts(), (4, 0));
        // An evicted ticket's drop frees nothing twice.
        t.remove(1);
        assert_eq!(g.counts(), (4, 0));
        drop(t);
        assert_eq!(g.counts(), (0, 0));
        let inner = g.lock();
        assert!(inner.pending.peers.is_empty() && inner.pending.sizes.is_empty());
    }

    #[test]
    fn one_peer_cannot_take_the_other_peers_slots() {
        let g = gate(8, 2, 10);
        let mut other = g.admit(ip(9));
        let mut flood: Vec<Ticket> = (0..100).map(|_| g.admit(ip(1))).collect();
        // The flood evicts only its own, oldest first: its two newest are
        // pending, and the other peer's is untouched.
        assert!(other.evicted.try_recv().is_err());
        assert_eq!(g.counts(), (3, 0));
        let seen = evicted(&mut flood);
        assert!(seen[..98].iter().all(|e| *e == Some(Eviction::Peer)), "{seen:?}");
        assert_eq!(seen[98..], [None, None]);
        // IPv4-mapped IPv6 is the same peer.
        let mapped = g.admit("::ffff:10.0.0.1".parse().unwrap());
        assert_eq!(g.counts(), (3, 0));
        drop((flood, mapped));
        assert_eq!(g.counts(), (1, 0));
        drop(other);
        assert!(g.lock().pending.peers.is_empty());
    }

    #[test]
    fn a_flood_from_many_peers_closes_its_own_before_a_client_with_one() {
        // Ten addresses, four handshakes each, against a client's one; at
        // equal counts the oldest goes, so the flood's own go first.
        let g = gate(16, 4, 10);
        let mut client = g.admit(ip(200));
        let mut flood: Vec<Ticket> = (0..400).map(|i| g.admit(ip(1 + (i % 10) as u8))).collect();
        assert!(client.evicted.try_recv().is_err());
        assert_eq!(g.counts(), (16, 0));
        drop(flood.drain(..));
        client.established().unwrap();
        assert_eq!(g.counts(), (0, 1));
    }

    #[test]
    fn at_the_connection_cap_an_unserved_one_goes_and_served_ones_stay() {
        let g = gate(10, 10, 2);
        let mut a = g.admit(ip(1));
        let mut b = g.admit(ip(2));
        a.established().unwrap();
        b.established().unwrap();
        let (id, peer) = a.key();
        g.served(id, peer);
        // Served, a connection's eviction channel closes.
        assert!(matches!(
            a.evicted.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        let mut c = g.admit(ip(3));
        c.established().unwrap();
        assert_eq!(b.evicted.try_recv(), Ok(Eviction::Unserved));
        drop(b);
        let (id, peer) = c.key();
        g.served(id, peer);
        // Every established connection is a client: the newcomer is refused.
        let mut d = g.admit(ip(4));
        assert_eq!(d.established(), Err(Eviction::Full));
        drop(d);
        assert_eq!(g.counts(), (0, 2));
        drop((a, c));
        assert_eq!(g.counts(), (0, 0));
        assert!(g.lock().unserved.sizes.is_empty());
    }
}
