//! A TCP proxy on loopback that can fail the way a network or a restarting server does: it
//! forwards bytes to a real server (TLS passes through untouched) until told to cut every
//! connection, and to hold new ones open without an answer, as an API server that accepts
//! connections while it starts may do. Used to show that the agent's watches never wait
//! forever on a peer that does not answer.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// The proxy; stopped (every connection cut) on drop.
pub struct Proxy {
    /// Where clients connect: `127.0.0.1:<port>`.
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept: AbortHandle,
}

#[derive(Default)]
struct State {
    /// Accept and hold new connections without forwarding a byte.
    silent: bool,
    connections: Vec<AbortHandle>,
}

impl Proxy {
    /// Starts forwarding connections to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let silent = shared.lock().unwrap().silent;
                let task = tokio::spawn(async move {
                    if silent {
                        // Held open, never answered, until cut.
                        let _held = &mut client;
                        std::future::pending::<()>().await;
                    }
                    if let Ok(mut server) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                shared.lock().unwrap().connections.push(task.abort_handle());
            }
        })
        .abort_handle();
        Proxy {
            addr,
            state,
            accept,
        }
    }

    /// Cuts every open connection (their sockets close) and, with `silent`, holds the ones
    /// that come next open without an answer; without it, forwards them again.
    pub fn cut(&self, silent: bool) {
        let mut state = self.state.lock().unwrap();
        state.silent = silent;
        for c in state.connections.drain(..) {
            c.abort();
        }
    }

    /// Forwards new connections again; the ones held silent stay so (a request already
    /// sent on one never gets an answer).
    pub fn heal(&self) {
        self.state.lock().unwrap().silent = false;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut(false);
    }
}
