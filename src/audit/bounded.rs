//! Every cluster request bounded in time and bytes, as a layer over kube's
//! client stack.
//!
//! kube's `read_timeout` is an idle timeout: a server that trickles a byte
//! every two seconds was still being read after 45 s, and a response body
//! is collected whole before it is decoded (a 3 GiB answer held 6.3 GB).
//! Here the whole request — connecting, waiting for the head, reading the
//! body — ends at one deadline, and a body past its cap is an error as soon
//! as the cap is crossed, before the rest is read.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use hyper::body::Bytes;
use hyper::http;
use tokio::time::{Instant, Sleep};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How much a request may take.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// From the request's start to the end of its body.
    pub total: Option<Duration>,
    /// Bytes of one response body.
    pub bytes: u64,
}

/// Why a response was cut short.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Exceeded {
    #[error("no whole answer within {} (--cluster-timeout)", humantime::format_duration(*.0))]
    Time(Duration),
    #[error("the answer is larger than {} MiB (--cluster-max-response-bytes)", .0 >> 20)]
    Bytes(u64),
}

/// The [`tower::Layer`] that puts [`Bounds`] on every request.
#[derive(Debug, Clone, Copy)]
pub struct Layer(pub Bounds);

impl<S> tower::Layer<S> for Layer {
    type Service = Service<S>;

    fn layer(&self, inner: S) -> Service<S> {
        Service {
            inner,
            bounds: self.0,
        }
    }
}

/// See [`Layer`].
#[derive(Debug, Clone)]
pub struct Service<S> {
    inner: S,
    bounds: Bounds,
}

impl<S, Req, B> tower::Service<Req> for Service<S>
where
    S: tower::Service<Req, Response = http::Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<Bounded<B>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let Bounds { total, bytes } = self.bounds;
        let deadline = total.map(|t| (Instant::now() + t, t));
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = match deadline {
                Some((at, t)) => tokio::time::timeout_at(at, answer)
                    .await
                    .map_err(|_| Box::new(Exceeded::Time(t)) as BoxError)?,
                None => answer.await,
            }
            .map_err(Into::into)?;
            Ok(response.map(|body| Bounded {
                body,
                deadline: deadline.map(|(at, t)| (Box::pin(tokio::time::sleep_until(at)), t)),
                left: bytes,
                cap: bytes,
            }))
        })
    }
}

/// A response body that ends in an error at the request's deadline or past
/// its byte cap.
pub struct Bounded<B> {
    body: B,
    deadline: Option<(Pin<Box<Sleep>>, Duration)>,
    left: u64,
    cap: u64,
}

impl<B> std::fmt::Debug for Bounded<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bounded")
            .field("left", &self.left)
            .finish_non_exhaustive()
    }
}

impl<B> Body for Bounded<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some((sleep, t)) = &mut self.deadline
            && sleep.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Some(Err(Box::new(Exceeded::Time(*t)))));
        }
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        let Some(frame) = frame else {
            return Poll::Ready(None);
        };
        let frame = frame.map_err(Into::into)?;
        if let Some(data) = frame.data_ref() {
            match self.left.checked_sub(data.len() as u64) {
                Some(left) => self.left = left,
                None => return Poll::Ready(Some(Err(Box::new(Exceeded::Bytes(self.cap))))),
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};
    use tower::{Layer as _, Service as _};

    type Chunks = StreamBody<futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, BoxError>>>>;

    fn answering(
        chunks: Vec<&'static [u8]>,
    ) -> impl tower::Service<
        (),
        Response = http::Response<Chunks>,
        Error = BoxError,
        Future = std::future::Ready<Result<http::Response<Chunks>, BoxError>>,
    > + Clone {
        tower::service_fn(move |()| {
            let frames: Vec<Result<Frame<Bytes>, BoxError>> = chunks
                .iter()
                .map(|c| Ok(Frame::data(Bytes::from_static(c))))
                .collect();
            std::future::ready(Ok(http::Response::new(StreamBody::new(futures::stream::iter(
                frames,
            )))))
        })
    }

    /// The body `chunks` make through a [`Layer`] of `bounds`, whole.
    async fn through(bounds: Bounds, chunks: Vec<&'static [u8]>) -> Result<Bytes, BoxError> {
        let response = Layer(bounds).layer(answering(chunks)).call(()).await?;
        Ok(response.into_body().collect().await?.to_bytes())
    }

    #[tokio::test]
    async fn a_body_past_its_cap_is_an_error_before_the_rest_is_read() {
        let bounds = Bounds {
            total: None,
            bytes: 10,
        };
        let whole = through(bounds, vec![b"12345", b"67890"]).await.unwrap();
        assert_eq!(whole, "1234567890");
        let err = through(bounds, vec![b"12345", b"67890", b"x"]).await.unwrap_err();
        assert_eq!(
            err.downcast_ref::<Exceeded>(),
            Some(&Exceeded::Bytes(10)),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_request_ends_at_its_deadline_however_it_trickles() {
        let total = Duration::from_millis(300);
        let bounds = Bounds {
            total: Some(total),
            bytes: u64::MAX,
        };
        // A head that never comes.
        let never =
            tower::service_fn(|()| std::future::pending::<Result<http::Response<Chunks>, BoxError>>());
        let err = Layer(bounds).layer(never).call(()).await.unwrap_err();
        assert_eq!(err.downcast_ref::<Exceeded>(), Some(&Exceeded::Time(total)));
        // A body that never stops sending a byte now and then: each read
        // is quick, the whole is not.
        let trickle = tower::service_fn(|()| async {
            let stream = futures::stream::unfold((), |()| async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Some((Ok::<_, BoxError>(Frame::data(Bytes::from_static(b"x"))), ()))
            });
            Ok::<_, BoxError>(http::Response::new(StreamBody::new(Box::pin(stream))))
        });
        let response = Layer(bounds).layer(trickle).call(()).await.unwrap();
        let err = response.into_body().collect().await.unwrap_err();
        assert_eq!(err.downcast_ref::<Exceeded>(), Some(&Exceeded::Time(total)));
    }
}
