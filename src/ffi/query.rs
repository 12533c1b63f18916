//! Commands the module runs itself with `RedisModule_Call`: questions to `CLUSTER`,
//! asked from timers in cluster mode, and `CONFIG GET`.

use std::ptr;

use redis_module::raw;

use super::{call, Ctx};

/// A reply of `RedisModule_Call`, freed when dropped unless it is an element of
/// another reply (which owns it).
struct CallReply(*mut raw::RedisModuleCallReply, bool);

impl CallReply {
    fn owned(reply: *mut raw::RedisModuleCallReply) -> CallReply {
        CallReply(reply, true)
    }

    fn integer(&self) -> Option<i64> {
        (!self.0.is_null()
            && call!(RedisModule_CallReplyType(self.0) else -1)
                == raw::REDISMODULE_REPLY_INTEGER as i32)
            .then(|| call!(RedisModule_CallReplyInteger(self.0) else 0))
    }

    fn text(&self) -> Option<String> {
        if self.0.is_null()
            || call!(RedisModule_CallReplyType(self.0) else -1)
                != raw::REDISMODULE_REPLY_STRING as i32
        {
            return None;
        }
        let mut len = 0usize;
        let p = call!(RedisModule_CallReplyStringPtr(self.0, &mut len) else ptr::null());
        if p.is_null() {
            return None;
        }
        // SAFETY: Redis returns a pointer to `len` bytes that live as long as the reply.
        let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
        Some(String::from_utf8_lossy(bytes).into_owned())
    }
}

impl CallReply {
    /// Element `index` of an array reply.
    fn element(&self, index: usize) -> Option<CallReply> {
        if self.0.is_null()
            || call!(RedisModule_CallReplyType(self.0) else -1)
                != raw::REDISMODULE_REPLY_ARRAY as i32
        {
            return None;
        }
        let element = call!(RedisModule_CallReplyArrayElement(self.0, index) else ptr::null_mut());
        // Elements belong to their array: freeing one would free it twice.
        (!element.is_null()).then_some(CallReply(element, false))
    }
}

impl Drop for CallReply {
    fn drop(&mut self) {
        if self.1 && !self.0.is_null() {
            call!(RedisModule_FreeCallReply(self.0) else ());
        }
    }
}

impl Ctx<'_> {
    /// `CLUSTER KEYSLOT key`: the hash slot of `key`.
    pub fn cluster_key_slot(self, key: &[u8]) -> Option<i64> {
        // SAFETY: reading a function pointer that Redis filled in at load time.
        let f = unsafe { raw::RedisModule_Call }?;
        // SAFETY: format "cb" takes a C string, then a char* and a size_t; all are
        // valid for the call.
        let reply = CallReply::owned(unsafe {
            f(
                self.raw(),
                c"CLUSTER".as_ptr(),
                c"cb".as_ptr(),
                c"KEYSLOT".as_ptr(),
                key.as_ptr(),
                key.len(),
            )
        });
        reply.integer()
    }

    /// `CONFIG GET name`: the value of one server setting.
    pub fn config_get(self, name: &std::ffi::CStr) -> Option<String> {
        // SAFETY: reading a function pointer that Redis filled in at load time.
        let f = unsafe { raw::RedisModule_Call }?;
        // SAFETY: format "cc" takes two C strings, valid for the call.
        let reply = CallReply::owned(unsafe {
            f(
                self.raw(),
                c"CONFIG".as_ptr(),
                c"cc".as_ptr(),
                c"GET".as_ptr(),
                name.as_ptr(),
            )
        });
        reply.element(1)?.text()
    }

    /// `CLUSTER NODES`: the cluster as this node sees it.
    pub fn cluster_nodes(self) -> Option<String> {
        // SAFETY: reading a function pointer that Redis filled in at load time.
        let f = unsafe { raw::RedisModule_Call }?;
        // SAFETY: format "c" takes one C string, valid for the call.
        let reply = CallReply::owned(unsafe {
            f(
                self.raw(),
                c"CLUSTER".as_ptr(),
                c"c".as_ptr(),
                c"NODES".as_ptr(),
            )
        });
        reply.text()
    }
}
