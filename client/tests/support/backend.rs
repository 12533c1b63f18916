//! The suites' lock API on the backend under test (`REDIS_LOCK_BACKEND`, see
//! `redis_lock_testkit::backend_name`): the same method names as the crate's
//! `LockCommands` and `AsyncLockCommands`, each acquire and info sent through that
//! backend. A test imports these instead of the crate's traits and runs unchanged
//! on the module, the function library and scripts. `LockClient`s find the backend
//! by themselves.

#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use redis_lock_client as client;
use redis_lock_client::{
    AsyncLockGuard, Backend, Lock, LockGuard, LockInfo, LockLost, Locked, Request, Result, Wait,
};

/// The backend the suites run on.
pub fn backend() -> Backend {
    redis_lock_testkit::backend_name()
        .parse()
        .expect("a backend name")
}

/// `LockCommands` on the backend under test.
pub trait LockCommands: client::LockCommands {
    fn try_acquire(&mut self, key: &str, ttl: Duration) -> Result<Option<Lock>> {
        client::LockCommands::acquire_with(self, Request::new(key, ttl).backend(backend()))
    }

    fn acquire(&mut self, key: &str, ttl: Duration, wait: Wait) -> Result<Option<Lock>> {
        let request = Request::new(key, ttl).wait(wait).backend(backend());
        client::LockCommands::acquire_with(self, request)
    }

    fn acquire_with(&mut self, request: Request) -> Result<Option<Lock>> {
        client::LockCommands::acquire_with(self, request.backend(backend()))
    }

    fn extend(&mut self, lock: &Lock, ttl: Duration) -> Result<bool> {
        client::LockCommands::extend(self, lock, ttl)
    }

    fn release(&mut self, lock: &Lock) -> Result<bool> {
        client::LockCommands::release(self, lock)
    }

    fn lock_info(&mut self, key: &str) -> Result<Option<LockInfo>> {
        client::LockCommands::lock_info_with(self, key, backend())
    }

    fn lock_guard(
        &mut self,
        key: &str,
        ttl: Duration,
        wait: Wait,
    ) -> Result<Option<LockGuard<'_, Self>>> {
        let request = Request::new(key, ttl).wait(wait).backend(backend());
        client::LockCommands::lock_guard_with(self, request)
    }

    fn run_locked<T>(
        &mut self,
        key: &str,
        ttl: Duration,
        wait: Wait,
        work: impl FnOnce(&Lock, &mut Self) -> T,
    ) -> Result<Option<Locked<T>>> {
        let request = Request::new(key, ttl).wait(wait).backend(backend());
        client::LockCommands::run_locked_with(self, request, work)
    }
}

impl<C: client::LockCommands> LockCommands for C {}

/// `AsyncLockCommands` on the backend under test.
pub trait AsyncLockCommands: client::AsyncLockCommands {
    fn try_acquire(
        &mut self,
        key: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Option<Lock>>> + Send {
        client::AsyncLockCommands::acquire_with(self, Request::new(key, ttl).backend(backend()))
    }

    fn acquire_with(
        &mut self,
        request: Request,
    ) -> impl Future<Output = Result<Option<Lock>>> + Send {
        client::AsyncLockCommands::acquire_with(self, request.backend(backend()))
    }

    fn extend(&mut self, lock: &Lock, ttl: Duration) -> impl Future<Output = Result<bool>> + Send {
        client::AsyncLockCommands::extend(self, lock, ttl)
    }

    fn release(&mut self, lock: &Lock) -> impl Future<Output = Result<bool>> + Send {
        client::AsyncLockCommands::release(self, lock)
    }

    fn lock_info(&mut self, key: &str) -> impl Future<Output = Result<Option<LockInfo>>> + Send {
        client::AsyncLockCommands::lock_info_with(self, key, backend())
    }

    fn lock_guard(
        &mut self,
        key: &str,
        ttl: Duration,
        wait: Wait,
    ) -> impl Future<Output = Result<Option<AsyncLockGuard>>> + Send
    where
        Self: Clone + Sync + 'static,
    {
        let request = Request::new(key, ttl).wait(wait).backend(backend());
        client::AsyncLockCommands::lock_guard_with(self, request)
    }

    fn lock_guard_with(
        &mut self,
        request: Request,
    ) -> impl Future<Output = Result<Option<AsyncLockGuard>>> + Send
    where
        Self: Clone + Sync + 'static,
    {
        client::AsyncLockCommands::lock_guard_with(self, request.backend(backend()))
    }

    fn run_locked<T, F, Fut>(
        &mut self,
        key: &str,
        ttl: Duration,
        wait: Wait,
        work: F,
    ) -> impl Future<Output = Result<Option<Locked<T>>>> + Send
    where
        Self: Clone + Sync + 'static,
        F: FnOnce(Lock, LockLost) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        let request = Request::new(key, ttl).wait(wait).backend(backend());
        client::AsyncLockCommands::run_locked_with(self, request, work)
    }

    fn run_locked_with<T, F, Fut>(
        &mut self,
        request: Request,
        work: F,
    ) -> impl Future<Output = Result<Option<Locked<T>>>> + Send
    where
        Self: Clone + Sync + 'static,
        F: FnOnce(Lock, LockLost) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        client::AsyncLockCommands::run_locked_with(self, request.backend(backend()), work)
    }
}

impl<C: client::AsyncLockCommands> AsyncLockCommands for C {}
