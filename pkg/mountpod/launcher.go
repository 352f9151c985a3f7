package mountpod

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rclone/rclone/fs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/csi-rclone/csi-rclone/pkg/worker"
)

// Options say where and how mount pods run.
type Options struct {
	Client kubernetes.Interface
	// Namespace holds the mount pods; the plugin may touch pods there only.
	Namespace string
	// NodeName is this node's: every pod the plugin makes runs on it.
	NodeName string
	// DriverName tells apart the pods of two drivers on one cluster.
	DriverName string
	// Version is the driver's, put on each pod it makes (LabelVersion).
	Version string
	// Image is the driver's own image, and its pull policy.
	Image      string
	PullPolicy corev1.PullPolicy
	// KubeletDir is the kubelet's root dir, as the plugin sees it.
	KubeletDir string
	// Resources of every mount pod, unless its volume asks for others
	// (VolumeResources), within Max: of Max, only the limits count.
	Resources, Max Resources
	// PriorityClass of the mount pods; empty: none.
	PriorityClass string
	// Poll is how often the launcher looks at a pod it waits for; 0: 100ms.
	Poll time.Duration
}

// Launcher starts, adopts and removes mount pods on one node.
type Launcher struct {
	opts Options

	mu      sync.Mutex
	known   map[types.UID]string // the pods this plugin counts, by uid: their version
	staging map[string]bool      // volumes Start was called for: never swept
}

// New checks opts.
func New(opts Options) (*Launcher, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("mount pods: no Kubernetes client")
	case opts.Namespace == "" || opts.NodeName == "" || opts.Image == "" || opts.KubeletDir == "":
		return nil, errors.New("mount pods: namespace, node name, image and kubelet dir are required")
	}
	if opts.Poll <= 0 {
		opts.Poll = 100 * time.Millisecond
	}
	if opts.PullPolicy == "" {
		opts.PullPolicy = corev1.PullIfNotPresent
	}
	return &Launcher{opts: opts, known: map[types.UID]string{}, staging: map[string]bool{}}, nil
}

func (l *Launcher) spec(volumeID string, uid int) podSpec {
	o := l.opts
	return podSpec{
		namespace: o.Namespace, node: o.NodeName, driver: o.DriverName, version: o.Version,
		image: o.Image, pullPolicy: o.PullPolicy, volumeID: volumeID, uid: int64(uid),
		res: o.Resources, priorityClass: o.PriorityClass,
	}
}

// cacheMargin is what a cache emptyDir holds beyond the VFS cache's own
// limit, which rclone enforces only now and then (and not on open files).
const cacheMargin = 1 << 30

// cacheSizeOf is the sizeLimit of a volume's cache emptyDir: its VFS cache
// limit (the tenant policy bounded it) and a margin; def when it has none.
func cacheSizeOf(vfsOpt map[string]string, def resource.Quantity) resource.Quantity {
	var size fs.SizeSuffix
	if err := size.Set(vfsOpt["vfs_cache_max_size"]); err != nil || size <= 0 {
		return def
	}
	return *resource.NewQuantity(int64(size)+cacheMargin, resource.BinarySI)
}

// Worker is a volume's worker in its mount pod.
type Worker struct {
	*worker.Conn
	l   *Launcher
	pod *corev1.Pod
}

// Pod names the worker's pod, "namespace/name".
func (w *Worker) Pod() string { return w.pod.Namespace + "/" + w.pod.Name }

// Wait waits for the worker to exit after the unmount, as a child's Wait
// does, and then deletes its pod, unless files are left in its cache not
// uploaded: then the pod stays, and the next stage of the volume on this
// node uploads them (Start takes the pod as it is).
func (w *Worker) Wait(d time.Duration) (worker.Exit, bool) {
	exit, ok := w.Conn.Wait(d)
	if !ok {
		// The report was lost with the connection: the cache says.
		n, err := worker.NotUploaded(CachePath(w.l.opts.KubeletDir, string(w.pod.UID)))
		exit, ok = worker.Exit{NotUploaded: n}, err == nil
		if err != nil {
			klog.ErrorS(err, "reading the mount pod's cache", "pod", w.Pod())
		}
	}
	if ok && exit.NotUploaded == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.l.delete(ctx, w.pod); err != nil {
			klog.ErrorS(err, "deleting the mount pod", "pod", w.Pod())
		}
	} else {
		klog.InfoS("keeping the mount pod: its cache holds files not uploaded, which the next stage of the volume uploads", "pod", w.Pod(), "files", exit.NotUploaded)
	}
	return exit, ok
}

// Start makes sure the volume's mount pod runs on this node, mounts the
// FUSE device at spec.MountPoint and hands it and spec to the pod's worker.
// A pod that is there already is used as it is, with its cache; one that
// serves the volume (its mount is dead, or the caller wants a new one) is
// told to start again first.
func (l *Launcher) Start(ctx context.Context, opts worker.Options, spec worker.Spec) (*Worker, error) {
	// Recovery's sweep runs while the first stages are served: it leaves
	// this volume's pod alone from now on.
	l.mu.Lock()
	l.staging[spec.VolumeID] = true
	l.mu.Unlock()
	res, err := l.resourcesFor(opts.PodResources)
	if err != nil {
		return nil, err
	}
	res.CacheSize = cacheSizeOf(spec.Volume.VFSOpt, res.CacheSize)
	pod, created, err := l.ensure(ctx, spec.VolumeID, opts.UID, res)
	if err != nil {
		return nil, err
	}
	w, err := l.startOn(ctx, pod, opts, spec)
	if err != nil && created {
		// Its cache holds nothing yet, and a stage that keeps failing
		// (bad credentials) is never unstaged: the pod goes now.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if derr := l.delete(ctx, pod); derr != nil {
				klog.ErrorS(derr, "deleting the mount pod of a failed stage", "pod", klog.KObj(pod))
			}
		}()
	}
	return w, err
}

// startOn hands the volume to pod's worker.
func (l *Launcher) startOn(ctx context.Context, pod *corev1.Pod, opts worker.Options, spec worker.Spec) (*Worker, error) {
	socket := SocketPath(l.opts.KubeletDir, string(pod.UID))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go l.watchStart(ctx, cancel, pod)
	for attempt := 0; ; attempt++ {
		conn, err := worker.StartOn(ctx, socket, opts, spec)
		if err == nil {
			l.track(pod, true)
			return &Worker{Conn: conn, l: l, pod: pod}, nil
		}
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: %w", worker.ErrUnavailable, cause)
		}
		if attempt > 0 || !isServing(err) {
			return nil, err
		}
		// Its worker serves an earlier mount of the volume: end it; the
		// container starts again and waits for this one.
		old, aerr := worker.Attach(ctx, socket, spec.VolumeID)
		if aerr != nil {
			return nil, err
		}
		old.Kill()
	}
}

func isServing(err error) bool {
	var me *worker.MountError
	return errors.As(err, &me) && errors.Is(me.Kind, worker.ErrMount) && strings.Contains(me.Message, "attach to it")
}

// watchStart ends a start early when the pod cannot run: its image cannot
// be had, its config is refused, or it is gone.
func (l *Launcher) watchStart(ctx context.Context, cancel context.CancelCauseFunc, pod *corev1.Pod) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * l.opts.Poll):
		}
		p, err := l.opts.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || err == nil && p.UID != pod.UID:
			cancel(fmt.Errorf("mount pod %s/%s was deleted", pod.Namespace, pod.Name))
			return
		case err != nil:
			continue
		}
		if why := cannotRun(p); why != "" {
			cancel(fmt.Errorf("mount pod %s/%s cannot run: %s", pod.Namespace, pod.Name, why))
			return
		}
	}
}

// cannotRun says why a pod's container will not start by itself, or "".
func cannotRun(p *corev1.Pod) string {
	if p.Status.Phase == corev1.PodFailed {
		return "failed: " + p.Status.Reason + " " + p.Status.Message
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError":
				return w.Reason + ": " + w.Message
			}
		}
	}
	return ""
}

// ensure returns the volume's pod on this node, made now if there is none
// (or if the one there is being deleted, or runs as another uid).
func (l *Launcher) ensure(ctx context.Context, volumeID string, uid int, res Resources) (_ *corev1.Pod, created bool, _ error) {
	ps := l.spec(volumeID, uid)
	ps.res = res
	want := ps.pod()
	pods := l.opts.Client.CoreV1().Pods(l.opts.Namespace)
	for {
		pod, err := pods.Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			pod, err = pods.Create(ctx, want, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return nil, false, fmt.Errorf("%w: creating mount pod %s/%s: %w", worker.ErrUnavailable, want.Namespace, want.Name, err)
			}
			metricPodsCreated.Inc()
			klog.InfoS("mount pod created", "pod", klog.KObj(pod), "volumeID", volumeID, "uid", uid)
			return pod, true, nil
		case err != nil:
			return nil, false, fmt.Errorf("%w: reading mount pod %s/%s: %w", worker.ErrUnavailable, want.Namespace, want.Name, err)
		case pod.DeletionTimestamp != nil:
			if err := l.waitGone(ctx, pod); err != nil {
				return nil, false, err
			}
		case runAsUser(pod) != int64(uid) || pod.Annotations[AnnotationVolumeID] != volumeID:
			klog.InfoS("replacing a mount pod made for another uid", "pod", klog.KObj(pod), "volumeID", volumeID)
			if err := l.delete(ctx, pod); err != nil {
				return nil, false, err
			}
		default:
			return pod, false, nil
		}
	}
}

func runAsUser(p *corev1.Pod) int64 {
	if sc := p.Spec.SecurityContext; sc != nil && sc.RunAsUser != nil {
		return *sc.RunAsUser
	}
	return -1
}

// delete removes pod and waits until it is gone.
func (l *Launcher) delete(ctx context.Context, pod *corev1.Pod) error {
	err := l.opts.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("%w: deleting mount pod %s/%s: %w", worker.ErrUnavailable, pod.Namespace, pod.Name, err)
	}
	l.track(pod, false)
	return l.waitGone(ctx, pod)
}

// waitGone waits until pod (that uid) is no more.
func (l *Launcher) waitGone(ctx context.Context, pod *corev1.Pod) error {
	for {
		p, err := l.opts.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && p.UID != pod.UID {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for mount pod %s/%s to go: %w", worker.ErrUnavailable, pod.Namespace, pod.Name, ctx.Err())
		case <-time.After(l.opts.Poll):
		}
	}
}

// Pods lists this node's mount pods, by volume id.
func (l *Launcher) Pods(ctx context.Context) (map[string]*corev1.Pod, error) {
	sel := labels.SelectorFromSet(labels.Set{LabelApp: AppName, LabelDriver: hash(l.opts.DriverName), LabelNode: hash(l.opts.NodeName)})
	list, err := l.opts.Client.CoreV1().Pods(l.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("%w: listing mount pods: %w", worker.ErrUnavailable, err)
	}
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		p := &list.Items[i]
		if id := p.Annotations[AnnotationVolumeID]; id != "" && p.Spec.NodeName == l.opts.NodeName && p.DeletionTimestamp == nil {
			out[id] = p
		}
	}
	return out, nil
}

// Adopt attaches to the worker of a volume's pod after a restart of the
// plugin. It returns worker.ErrNotStarted when the pod's worker serves no
// volume, and an error wrapping ErrNoPod when there is no pod.
func (l *Launcher) Adopt(ctx context.Context, volumeID string, pod *corev1.Pod) (*Worker, error) {
	if pod == nil {
		return nil, ErrNoPod
	}
	conn, err := worker.Attach(ctx, SocketPath(l.opts.KubeletDir, string(pod.UID)), volumeID)
	if err != nil {
		return nil, err
	}
	metricPodsAdopted.Inc()
	l.track(pod, true)
	return &Worker{Conn: conn, l: l, pod: pod}, nil
}

// ErrNoPod says a volume has no mount pod on this node.
var ErrNoPod = errors.New("no mount pod")

// Sweep deletes the mount pods of this node whose volume is not in keep,
// nor being staged since this launcher started: left by a stage that
// failed late or a record that was lost.
func (l *Launcher) Sweep(ctx context.Context, pods map[string]*corev1.Pod, keep func(volumeID string) bool) {
	for id, p := range pods {
		l.mu.Lock()
		staging := l.staging[id]
		l.mu.Unlock()
		if keep(id) || staging {
			continue
		}
		klog.InfoS("deleting a mount pod that no volume of this node needs", "pod", klog.KObj(p), "volumeID", id)
		if err := l.delete(ctx, p); err != nil {
			klog.ErrorS(err, "deleting a mount pod", "pod", klog.KObj(p))
		}
	}
}

// track counts pod in (add) or out of the pods per version.
func (l *Launcher) track(pod *corev1.Pod, add bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, known := l.known[pod.UID]
	switch {
	case add && !known:
		l.known[pod.UID] = pod.Labels[LabelVersion]
		metricPods.WithLabelValues(pod.Labels[LabelVersion]).Inc()
	case !add && known:
		delete(l.known, pod.UID)
		metricPods.WithLabelValues(pod.Labels[LabelVersion]).Dec()
	}
}

// adoptTimeout bounds an attach to one pod after a restart: a worker that
// runs answers at once; one whose container is starting again has no
// volume to give back anyway.
const adoptTimeout = 3 * time.Second

// Recover runs once as the plugin starts: it lists this node's mount pods,
// deletes those of no recorded volume, and attaches to the worker of each
// recorded one, at once. A volume that is missing from the result has no
// pod, or a pod whose worker serves nothing (or does not answer): it is
// mounted again, in the same pod if there is one (Start).
func (l *Launcher) Recover(ctx context.Context, volumeIDs []string) map[string]*Worker {
	pods, err := l.Pods(ctx)
	if err != nil {
		klog.ErrorS(err, "listing the mount pods; every volume is mounted again")
		return nil
	}
	keep := make(map[string]bool, len(volumeIDs))
	for _, id := range volumeIDs {
		keep[id] = true
	}
	l.Sweep(ctx, pods, func(id string) bool { return keep[id] })
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]*Worker{}
	for _, id := range volumeIDs {
		pod := pods[id]
		if pod == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, adoptTimeout)
			defer cancel()
			w, err := l.Adopt(ctx, id, pod)
			if err != nil {
				klog.InfoS("the volume's mount pod serves nothing; mounting again", "volumeID", id, "pod", klog.KObj(pod), "err", err)
				return
			}
			mu.Lock()
			out[id] = w
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// Volume context keys with which a volume asks for its mount pod's own
// resources: lower than the defaults, or higher up to the operator's
// maximums (--mount-pod-max-memory-limit, --mount-pod-max-cpu-limit).
const (
	KeyMemoryRequest = "mountPodMemoryRequest"
	KeyMemoryLimit   = "mountPodMemoryLimit"
	KeyCPURequest    = "mountPodCPURequest"
	KeyCPULimit      = "mountPodCPULimit"
)

// resourcesFor lays what a volume asks for over the defaults. A limit above
// the operator's maximum is refused; a request above its limit is lowered
// to it.
func (l *Launcher) resourcesFor(asked map[string]string) (Resources, error) {
	res := l.opts.Resources
	for key, into := range map[string]*resource.Quantity{
		KeyMemoryRequest: &res.MemoryRequest, KeyMemoryLimit: &res.MemoryLimit,
		KeyCPURequest: &res.CPURequest, KeyCPULimit: &res.CPULimit,
	} {
		v, ok := asked[key]
		if !ok {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() <= 0 {
			return res, fmt.Errorf("%w: %s %q is not a positive quantity", worker.ErrInvalid, key, v)
		}
		*into = q
	}
	for key, lim := range map[string]struct{ got, max resource.Quantity }{
		KeyMemoryLimit: {res.MemoryLimit, l.opts.Max.MemoryLimit},
		KeyCPULimit:    {res.CPULimit, l.opts.Max.CPULimit},
	} {
		if !lim.max.IsZero() && (lim.got.IsZero() || lim.got.Cmp(lim.max) > 0) {
			if _, asked := asked[key]; asked {
				return res, fmt.Errorf("%w: %s %s is above the operator's maximum %s", worker.ErrInvalid, key, lim.got.String(), lim.max.String())
			}
		}
	}
	clamp := func(req *resource.Quantity, lim resource.Quantity) {
		if !lim.IsZero() && req.Cmp(lim) > 0 {
			*req = lim.DeepCopy()
		}
	}
	clamp(&res.MemoryRequest, res.MemoryLimit)
	clamp(&res.CPURequest, res.CPULimit)
	return res, nil
}
