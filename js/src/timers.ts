/**
 * Timers for any delay the protocol allows. Node's `setTimeout` takes at most
 * 2^31 − 1 ms (24.8 days) and turns a longer delay into 1 ms, with a
 * `TimeoutOverflowWarning`; TTLs and waits go up to 2^62 − 1 ms. {@link later}
 * waits out a longer delay in steps of the longest one Node takes.
 */

/** The longest delay `setTimeout` honours. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** A timer made by {@link later}. */
export interface Timer {
  /** Stops it; the callback does not run. */
  clear(): void;
}

/**
 * Runs `callback` once after `ms` milliseconds (rounded up; 0 or less: on the next
 * turn of the timers), however long. `unref`: the timer does not keep the process
 * alive.
 */
export function later(ms: number, callback: () => void, unref = false): Timer {
  let handle: NodeJS.Timeout | undefined;
  let left = Number.isNaN(ms) ? 0 : Math.max(Math.ceil(ms), 0);
  const arm = (): void => {
    const step = Math.min(left, MAX_TIMER_MS);
    left -= step;
    handle = setTimeout(left > 0 ? arm : callback, step);
    if (unref) handle.unref();
  };
  arm();
  return {
    clear: () => clearTimeout(handle),
  };
}
