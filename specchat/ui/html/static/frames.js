// Gradio 6's status trackers (its chunk statustracker-*.js) count an event's elapsed time on every
// animation frame while the event is pending, and stop when it is not; a tracker taken off the page
// while pending never stops (no teardown ends its loop). Every page has one from its own loading:
// 60 frames a second for nothing, 5-8 % of a core in a browser drawing in software (headless
// Chromium on a 2-core machine: 0.8 s of CPU per 10 s idle, 0.03 s once stopped), CPU that the
// model's threads then do not get. Such a loop cannot be reached (it keeps its own reference to
// requestAnimationFrame), but each frame it reads performance.now(): every 2 s, for one frame,
// that read throws when the caller is that loop's frame callback (an unnamed function of the
// tracker's chunk called by the browser itself: the only frame below this script's), which ends
// the loop. Every other reader gets the time, the tracker chunk's own included (its status store
// reads it for each event's update). A tracker still pending starts a new loop when its event
// changes state; its elapsed-time text (our events hide it) is all it loses.
(function stopLeakedFrameLoops() {
  const perf = window.performance, now = perf.now.bind(perf);
  const STOPPED = 'specchat: stopped a Gradio status tracker frame loop (static/frames.js)';
  // the throw is the point, not a fault: kept out of the console ("Uncaught Error", every 2 s)
  window.addEventListener('error', (ev) => { if (ev.error && ev.error.message === STOPPED) ev.preventDefault(); });
  const fromTrackerLoop = () => {
    // below "Error", this function and the reader this script put in place: the caller's frames
    const frames = (new Error().stack || '').split('\n').slice(3);
    return frames.length === 1 && /^\s*at (?:https?:\/\/|\/)\S*statustracker[^\s/]*\.js:\d+:\d+$/.test(frames[0]);
  };
  function sweep() {
    perf.now = () => {
      if (fromTrackerLoop()) throw new Error(STOPPED);
      return now();
    };
    requestAnimationFrame(() => { setTimeout(() => { perf.now = now; }, 0); });
  }
  setInterval(sweep, 2000);
})();
